"""Transports for the SDK's ClientSession that bound what they keep in memory.

The SDK's stdio transport buffers a line until its newline (a 100 MB reply is
100 MB of string, joined quadratically), logs every non-JSON line with a
traceback, and hands the server the host's HOME/LOGNAME/SHELL/TERM/USER on top
of what we pass. This one keeps the SDK's message types, parser and session,
and replaces only the pipes: the exact environment we give, lines capped at
`max_message_bytes` (an oversized reply becomes a JSON-RPC error for its
request id, found at either end of the line), non-JSON output dropped and,
past a bound, treated as a broken server, and stderr logged up to a budget
then drained unread. The HTTP transport is the SDK's, over an httpx2 client
whose responses are cut at the same bound.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass, field
from typing import Any

import anyio
import httpx2
from anyio.abc import Process
from anyio.streams.memory import MemoryObjectSendStream
from mcp.client._transport import TransportStreams
from mcp.client.streamable_http import streamable_http_client
from mcp.os.posix.utilities import terminate_posix_process_tree
from mcp.shared.message import SessionMessage
from mcp_types import ErrorData, JSONRPCError, jsonrpc_message_adapter

from spearpy.errors import SpearpyError

OVERSIZE_CODE = -32099
OVERSIZE_TAG = "spearpy: reply over the message limit"
GARBAGE_LINES_LIMIT = 10_000
GARBAGE_BYTES_LIMIT = 4 * 1024 * 1024
STDERR_LOG_BUDGET = 64 * 1024
STDERR_TAIL = 2048
_SAMPLE = 1024
_GRACE_S = 1.0

Streams = TransportStreams
_ID = rb'"id"\s*:\s*(-?\d+|"(?:[^"\\]|\\.)*")'
_JSONRPC = rb'"jsonrpc"\s*:\s*"2\.0"'
_ID_HEAD = re.compile(rb'^\s*\{\s*(?:' + _JSONRPC + rb'\s*,\s*)?' + _ID)
_ID_TAIL = re.compile(_ID + rb'\s*(?:,\s*' + _JSONRPC + rb'\s*)?\}\s*\Z')


@dataclass
class TransportInfo:
    """What one connection learned about its server, for status and errors."""

    pid: int | None = None
    returncode: int | None = None
    fatal: str | None = None
    garbage_lines: int = 0
    garbage_bytes: int = 0
    stderr_bytes: int = 0
    stderr_tail: bytearray = field(default_factory=bytearray)

    def describe_exit(self) -> str:
        parts = [self.fatal] if self.fatal else []
        if self.returncode is not None:
            parts.append(f"exit code {self.returncode}")
        tail = self.stderr_tail.decode("utf-8", "replace").strip()
        if tail:
            parts.append("stderr: " + tail[-400:])
        return "; ".join(parts) or "the connection closed"


@dataclass
class Line:
    data: bytes
    size: int
    oversized: bool = False
    tail: bytes = b""


class LineFramer:
    """Splits a byte stream at newlines, keeping at most `limit` bytes of a
    line; of a longer one only its size and both ends survive."""

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._parts: list[bytes] = []
        self._size = 0
        self._head = b""
        self._tail = b""

    def feed(self, chunk: bytes) -> Iterator[Line]:
        start = 0
        while True:
            newline = chunk.find(b"\n", start)
            self._take(chunk[start:] if newline < 0 else chunk[start:newline])
            if newline < 0:
                return
            yield self._finish()
            start = newline + 1

    def _take(self, piece: bytes) -> None:
        if not piece:
            return
        self._size += len(piece)
        if self._head:
            self._tail = (self._tail + piece)[-_SAMPLE:]
        elif self._size > self._limit:
            joined = b"".join(self._parts) + piece
            self._head, self._tail, self._parts = joined[:_SAMPLE], joined[-_SAMPLE:], []
        else:
            self._parts.append(piece)

    def _finish(self) -> Line:
        if self._head:
            line = Line(self._head, self._size, True, self._tail)
        else:
            line = Line(b"".join(self._parts), self._size)
        self._parts, self._size, self._head, self._tail = [], 0, b"", b""
        return line


def oversize_id(head: bytes, tail: bytes) -> int | str | None:
    """The request id of a JSON-RPC reply known only by its two ends. Python
    servers write the id first, TypeScript ones last; both are top-level."""
    for pattern, sample in ((_ID_HEAD, head), (_ID_TAIL, tail)):
        match = pattern.search(sample)
        if match:
            token = match.group(1)
            value = jsonrpc_message_adapter.validate_json(
                b'{"jsonrpc":"2.0","id":' + token + b',"result":{}}', by_name=False)
            return getattr(value, "id", None)
    return None


def _oversize_error(msg_id: int | str, size: int, limit: int) -> SessionMessage:
    message = f"{OVERSIZE_TAG}: {size} bytes, limit {limit}"
    return SessionMessage(JSONRPCError(jsonrpc="2.0", id=msg_id,
                                       error=ErrorData(code=OVERSIZE_CODE, message=message)))


@dataclass
class StdioLaunch:
    command: str
    args: list[str]
    env: dict[str, str]
    cwd: str | None


@asynccontextmanager
async def bounded_stdio(launch: StdioLaunch, *, max_message_bytes: int, info: TransportInfo,
                        log: Any, on_broken: Callable[[], None]) -> AsyncIterator[Streams]:
    """Spawn the server in its own process group and yield the session's streams.

    `on_broken` is called (on the loop) when the server's stdout ends or is
    judged broken, so the owner can close the session at once."""
    process = await anyio.open_process([launch.command, *launch.args], env=launch.env,
                                       cwd=launch.cwd, stderr=subprocess.PIPE,
                                       start_new_session=True)
    info.pid = process.pid
    read_send, read_stream = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    write_stream, write_receive = anyio.create_memory_object_stream[SessionMessage](0)

    def broken(reason: str) -> None:
        info.fatal = info.fatal or reason
        on_broken()

    async def stdout_reader() -> None:
        assert process.stdout is not None
        framer = LineFramer(max_message_bytes)
        try:
            async with read_send:
                async for chunk in process.stdout:
                    for line in framer.feed(chunk):
                        delivered = await _deliver(line, read_send, info, max_message_bytes,
                                                   log, broken)
                        if not delivered:
                            return
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            pass
        finally:
            on_broken()  # EOF: the server exited or closed stdout

    async def stdin_writer() -> None:
        assert process.stdin is not None
        try:
            async with write_receive:
                async for message in write_receive:
                    data = message.message.model_dump_json(by_alias=True, exclude_unset=True)
                    await process.stdin.send((data + "\n").encode())
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            broken("the server stopped reading its stdin")

    async with anyio.create_task_group() as tg:
        tg.start_soon(stdout_reader)
        tg.start_soon(stdin_writer)
        tg.start_soon(_drain_stderr, process, info, log)
        try:
            yield read_stream, write_stream
        finally:
            with anyio.CancelScope(shield=True):
                await _stop(process, info)
                for stream in (read_stream, write_stream, read_send, write_receive):
                    await stream.aclose()
            tg.cancel_scope.cancel()


async def _deliver(line: Line, send: MemoryObjectSendStream[SessionMessage | Exception],
                   info: TransportInfo, limit: int, log: Any,
                   broken: Callable[[str], None]) -> bool:
    """Forward one stdout line; False when the connection must end."""
    if line.oversized:
        msg_id = oversize_id(line.data, line.tail)
        if msg_id is None:
            broken(f"the server wrote a {line.size}-byte message (limit {limit}) "
                   "with no request id")
            return False
        await send.send(_oversize_error(msg_id, line.size, limit))
        return True
    data = line.data.strip()
    if not data:
        return True
    try:
        message = jsonrpc_message_adapter.validate_json(data, by_name=False)
    except ValueError:
        info.garbage_lines += 1
        info.garbage_bytes += len(data)
        if info.garbage_lines <= 3:
            log.warning("mcp server wrote non-JSON-RPC output to stdout (dropped)",
                        sample=data[:200].decode("utf-8", "replace"))
        if info.garbage_lines > GARBAGE_LINES_LIMIT or info.garbage_bytes > GARBAGE_BYTES_LIMIT:
            broken(f"the server flooded stdout with non-JSON-RPC output "
                   f"({info.garbage_lines} lines, {info.garbage_bytes} bytes)")
            return False
        return True
    await send.send(SessionMessage(message))
    return True


async def _drain_stderr(process: Process, info: TransportInfo, log: Any) -> None:
    """Log the server's stderr line by line up to a byte budget, keep its
    tail for error messages, and drain the rest so the server never blocks."""
    assert process.stderr is not None
    framer = LineFramer(1024)
    logged = 0
    with suppress(anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
        async for chunk in process.stderr:
            info.stderr_bytes += len(chunk)
            info.stderr_tail += chunk
            del info.stderr_tail[:-STDERR_TAIL]
            if logged > STDERR_LOG_BUDGET:
                continue  # over budget: drained, kept in the tail, not logged
            for line in framer.feed(chunk):
                text = line.data.decode("utf-8", "replace").rstrip()[:1000]
                logged += len(text) + 1
                if logged > STDERR_LOG_BUDGET:
                    log.info("mcp server stderr over budget; the rest is not logged",
                             budget_bytes=STDERR_LOG_BUDGET)
                    break
                if text:
                    log.info("mcp server stderr", line=text, truncated=line.oversized)


async def _stop(process: Process, info: TransportInfo) -> None:
    """Close stdin, give the server a moment, then end its whole process group."""
    if process.stdin is not None:
        with suppress(OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
            await process.stdin.aclose()
    with anyio.move_on_after(_GRACE_S):
        while process.returncode is None:
            await anyio.sleep(0.01)
    if process.returncode is None:
        if sys.platform == "win32":  # pragma: no cover - no process groups there
            process.kill()
        else:
            await terminate_posix_process_tree(process, _GRACE_S)
        with anyio.move_on_after(_GRACE_S):
            await process.wait()
    info.returncode = process.returncode
    for pipe in (process.stdout, process.stderr):
        if pipe is not None:
            with suppress(OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
                await pipe.aclose()


class ResponseTooLarge(SpearpyError, httpx2.StreamError):
    """An MCP server's HTTP answer past its byte bound (an httpx stream error to the SDK)."""


class _CappedStream(httpx2.AsyncByteStream):
    def __init__(self, inner: Any, limit: int) -> None:
        self._inner, self._limit = inner, limit

    async def __aiter__(self) -> AsyncIterator[bytes]:
        seen = 0
        async for chunk in self._inner:
            seen += len(chunk)
            if seen > self._limit:
                raise ResponseTooLarge(f"{OVERSIZE_TAG}: over {self._limit} bytes")
            yield chunk

    async def aclose(self) -> None:
        await self._inner.aclose()


class CappedTransport(httpx2.AsyncBaseTransport):
    """Cuts a JSON response body at `limit` bytes. The SDK turns the stream
    error into a JSON-RPC error for that request; SSE events are capped by
    the SDK's own `max_sse_event_size`."""

    def __init__(self, inner: httpx2.AsyncBaseTransport, limit: int) -> None:
        self._inner, self._limit = inner, limit

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        response = await self._inner.handle_async_request(request)
        if "json" not in response.headers.get("content-type", ""):
            return response
        return httpx2.Response(response.status_code, headers=response.headers,
                               stream=_CappedStream(response.stream, self._limit),
                               request=request, extensions=response.extensions)

    async def aclose(self) -> None:
        await self._inner.aclose()


@asynccontextmanager
async def capped_http(url: str, headers: Mapping[str, str], *, max_message_bytes: int,
                      connect_timeout_s: float) -> AsyncIterator[Streams]:
    # identity: a compressed body would be counted before it is inflated.
    client = httpx2.AsyncClient(
        headers={"Accept-Encoding": "identity", **headers},
        timeout=httpx2.Timeout(connect_timeout_s, read=300.0),
        transport=CappedTransport(httpx2.AsyncHTTPTransport(), max_message_bytes))
    async with client, streamable_http_client(url, http_client=client,
                                               max_sse_event_size=max_message_bytes) as streams:
        yield streams
