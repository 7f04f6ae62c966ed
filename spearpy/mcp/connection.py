"""One persistent SDK session to one MCP server, living on the manager's loop.

An owner task enters the transport and the `ClientSession` and stays inside
them until told to stop or until the server breaks: anyio scopes must be
entered and left by the same task, so calls from other tasks only borrow the
session. Started on first use; after a death the next use restarts it, at
once the first time and with a growing backoff while it keeps failing.
Everything here runs on the loop thread, so plain attributes need no lock.
"""

from __future__ import annotations

import asyncio
import time
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from typing import Any

import anyio
from mcp.client.session import ClientSession
from mcp.shared.exceptions import MCPError
from mcp_types import (
    CONNECTION_CLOSED,
    CallToolResult,
    Implementation,
    LoggingMessageNotificationParams,
    PaginatedRequestParams,
    Tool,
    ToolListChangedNotification,
)
from pydantic import ValidationError

from spearpy.mcp import results as r
from spearpy.mcp.models import McpError
from spearpy.mcp.registry import ServerEntry
from spearpy.mcp.transports import (
    OVERSIZE_CODE,
    OVERSIZE_TAG,
    StdioLaunch,
    TransportInfo,
    bounded_stdio,
    capped_http,
)

CLIENT_INFO = Implementation(name="spearpy", version="0.1.0")
MAX_LIST_PAGES = 50
MAX_TOOLS = 2000
SERVER_LOG_BUDGET = 64 * 1024
BACKOFF_BASE_S = 0.5
BACKOFF_MAX_S = 30.0


def backoff_s(failures: int) -> float:
    """Delay before restart attempt number `failures`: none after a first
    failure (a crash mid-call should not cost the next call), then doubling."""
    return 0.0 if failures <= 1 else min(BACKOFF_BASE_S * 2 ** (failures - 2), BACKOFF_MAX_S)


def message_cap(max_output_bytes: int) -> int:
    """Largest JSON-RPC message kept: room for escaping and base64 around an
    output of `max_output_bytes`, and for large tool listings."""
    return min(max(4 * max_output_bytes + 256 * 1024, 1024 * 1024), 64 * 1024 * 1024)


def _leaf(exc: BaseException) -> BaseException:
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


@dataclass(eq=False)
class _Generation:
    """One start of the server: its process or HTTP session, from launch to death.

    Everything a dying generation touches is its own, so an old one winding
    down can never clear or cancel the one that replaced it."""

    number: int
    ready: asyncio.Future[ClientSession]
    scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)
    info: TransportInfo = field(default_factory=TransportInfo)
    task: asyncio.Task[None] | None = None
    session: ClientSession | None = None
    reason: str | None = None


class Connection:
    def __init__(self, entry: ServerEntry, log: Any,
                 host_env: dict[str, str] | None = None) -> None:
        self.entry = entry
        self.log = log.bind(server_id=entry.server_id)
        self._host_env = host_env
        self.sem = asyncio.Semaphore(entry.record.budgets.max_concurrency)
        self.state = "idle"
        self.last_error: str | None = None
        self.starts = 0
        self._gen: _Generation | None = None
        self._failures = 0
        self._retry_at = 0.0
        self._closing = False
        self._tools: list[Tool] | None = None
        self._tool_names: frozenset[str] = frozenset()  # of self._tools, for each call's check
        self._tools_epoch = -1
        self._epoch = 0
        self._list_lock = asyncio.Lock()
        self._log_bytes = 0

    @property
    def server_id(self) -> str:
        return self.entry.server_id

    @property
    def pid(self) -> int | None:
        return self._gen.info.pid if self._gen is not None else None

    # -- lifecycle ---------------------------------------------------------

    async def ensure(self, deadline: float) -> _Generation:
        """The live generation, starting the server if needed (one start is
        shared by every waiter)."""
        if self._closing:
            raise McpError(r.MCP_SERVER_UNAVAILABLE, "the MCP manager is closing")
        gen = self._gen
        if gen is not None and gen.session is not None:
            return gen
        if gen is None or gen.ready.done():
            wait = self._retry_at - time.monotonic()
            if wait > 0:
                raise McpError(r.MCP_SERVER_UNAVAILABLE,
                               f"server {self.server_id!r} failed ({self.last_error}); "
                               f"next restart attempt in {wait:.1f}s")
            gen = self._launch()
        try:
            async with asyncio.timeout_at(deadline):
                await asyncio.shield(gen.ready)
        except TimeoutError:
            raise McpError(r.MCP_TIMEOUT, f"server {self.server_id!r} did not start "
                                          "before the deadline") from None
        return gen

    def _launch(self) -> _Generation:
        loop = asyncio.get_running_loop()
        self.starts += 1
        gen = _Generation(self.starts, loop.create_future())
        # A start that fails while nobody waits must not warn "never retrieved".
        gen.ready.add_done_callback(lambda f: f.cancelled() or f.exception())
        self._gen, self.state = gen, "starting"
        gen.task = loop.create_task(self._own(gen), name=f"mcp:{self.server_id}:{gen.number}")
        return gen

    def _transport(self, gen: _Generation) -> Any:
        record = self.entry.record
        cap = message_cap(record.budgets.max_tool_output_bytes)
        if record.transport == "stdio":
            assert record.stdio is not None
            launch = StdioLaunch(record.stdio.command, list(record.stdio.args),
                                 self.entry.process_env(self._host_env), record.stdio.cwd)
            return bounded_stdio(launch, max_message_bytes=cap, info=gen.info, log=self.log,
                                 on_broken=lambda: self._broken(gen))
        assert self.entry.url is not None
        return capped_http(self.entry.url, self.entry.headers, max_message_bytes=cap,
                           connect_timeout_s=record.budgets.effective_list_timeout_ms / 1000)

    def _broken(self, gen: _Generation) -> None:
        """End `gen` now: no new call gets its session, its owner winds down."""
        gen.session = None
        gen.scope.cancel()

    async def _own(self, gen: _Generation) -> None:
        error: BaseException | None = None
        startup_s = self.entry.record.budgets.effective_list_timeout_ms / 1000
        try:
            with gen.scope:
                async with AsyncExitStack() as stack:
                    read, write = await stack.enter_async_context(self._transport(gen))
                    session = await stack.enter_async_context(ClientSession(
                        read, write, message_handler=self._on_message,
                        logging_callback=self._on_log, client_info=CLIENT_INFO))
                    with anyio.fail_after(startup_s):
                        await session.initialize()
                    gen.session = session
                    if self._gen is gen:
                        self.state, self._failures = "ready", 0
                        self._epoch += 1  # a new session: what was listed before is stale
                    gen.ready.set_result(session)
                    self.log.info("mcp server ready", pid=gen.info.pid, url=self.entry.url)
                    await anyio.sleep_forever()
        except Exception as exc:
            error = _leaf(exc)
        finally:
            gen.session = None
            gen.reason = self._reason(gen, error, startup_s)
            if not gen.ready.done():
                gen.ready.set_exception(McpError(
                    r.MCP_SERVER_UNAVAILABLE, f"{self.server_id!r} could not start: {gen.reason}"))
            if self._closing:
                self.state = "closed"
            elif self._gen is gen:
                self._failures += 1
                self._retry_at = time.monotonic() + backoff_s(self._failures)
                self.state, self.last_error = "failed", gen.reason
                self.log.warning("mcp server stopped", reason=gen.reason, failures=self._failures)

    def _reason(self, gen: _Generation, error: BaseException | None, startup_s: float) -> str:
        if isinstance(error, TimeoutError):
            return f"no reply to initialize within {startup_s:g}s; {gen.info.describe_exit()}"
        if isinstance(error, OSError):
            command = self.entry.record.stdio.command if self.entry.record.stdio else None
            return f"cannot start {command!r}: {error}"
        if error is not None:
            return f"{type(error).__name__}: {error}; {gen.info.describe_exit()}"
        return gen.info.describe_exit()

    async def close(self) -> None:
        self._closing = True
        gen = self._gen
        if gen is not None:
            self._broken(gen)
            if gen.task is not None and not gen.task.done():
                await asyncio.wait({gen.task}, timeout=5.0)
        self.state = "closed"

    # -- server messages ---------------------------------------------------

    async def _on_message(self, message: Any) -> None:
        if isinstance(message, ToolListChangedNotification):
            self._epoch += 1
            self.log.info("mcp server tools changed")
        elif isinstance(message, Exception):
            self.log.warning("mcp transport error", error=str(message)[:500])

    async def _on_log(self, params: LoggingMessageNotificationParams) -> None:
        text = str(params.data)[:1000]
        self._log_bytes += len(text)
        if self._log_bytes <= SERVER_LOG_BUDGET:
            self.log.info("mcp server log", level=params.level, data=text)

    # -- requests ----------------------------------------------------------

    def cached_tools(self) -> list[Tool] | None:
        live = self._gen is not None and self._gen.session is not None
        return self._tools if live and self._tools_epoch == self._epoch else None

    def knows(self, tool: str) -> bool | None:
        """Whether the current listing has `tool`; None when there is none."""
        return None if self.cached_tools() is None else tool in self._tool_names

    async def list_tools(self, deadline: float) -> list[Tool]:
        gen = await self.ensure(deadline)
        cached = self.cached_tools()
        if cached is not None:
            return cached
        async with self._list_lock:
            cached = self.cached_tools()
            if cached is not None:
                return cached
            session, epoch = gen.session, self._epoch
            if session is None:  # died while this waited for the lock
                raise McpError(r.MCP_SERVER_UNAVAILABLE, f"server {self.server_id!r} stopped: "
                                                         f"{gen.reason or 'the connection closed'}")
            budget = self.entry.record.budgets.effective_list_timeout_ms / 1000
            tools: list[Tool] = []
            try:
                async with asyncio.timeout_at(min(deadline, time.monotonic() + budget)):
                    cursor: str | None = None
                    for _ in range(MAX_LIST_PAGES):
                        params = PaginatedRequestParams(cursor=cursor) if cursor else None
                        page = await session.list_tools(params=params)
                        tools.extend(page.tools)
                        cursor = page.next_cursor
                        if not cursor or len(tools) >= MAX_TOOLS:
                            break
            except TimeoutError:
                raise McpError(r.MCP_TIMEOUT, f"server {self.server_id!r} did not list its "
                                              f"tools within {budget:g}s") from None
            except Exception as exc:
                raise await self._failure(exc, "tools/list", gen) from None
            self._tools, self._tools_epoch = tools[:MAX_TOOLS], epoch
            self._tool_names = frozenset(t.name for t in self._tools)
            return self._tools

    async def call(self, tool: str, arguments: dict[str, Any], *, deadline: float,
                   budget_s: float) -> CallToolResult:
        gen = await self.ensure(deadline)
        end = min(deadline, time.monotonic() + budget_s)
        phase = "waiting for a free slot"
        try:
            async with asyncio.timeout_at(end):
                async with self.sem:
                    phase = "running"
                    session = gen.session
                    if session is None:  # died while this call waited for a slot
                        raise McpError(r.MCP_SERVER_UNAVAILABLE, f"server {self.server_id!r} "
                                       f"stopped: {gen.reason or 'the connection closed'}")
                    return await session.call_tool(tool, arguments)
        except TimeoutError:
            why = (f"the tool budget of {budget_s * 1000:.0f} ms" if end < deadline
                   else "the caller's deadline")
            if phase != "running":
                why += f" (all {self.entry.record.budgets.max_concurrency} slots busy)"
            raise McpError(r.MCP_TIMEOUT,
                           f"{self.server_id}.{tool}: no result within {why}") from None
        except McpError:
            raise
        except Exception as exc:
            raise await self._failure(exc, f"tools/call {tool}", gen) from None

    async def _failure(self, exc: BaseException, what: str, gen: _Generation) -> McpError:
        exc = _leaf(exc)
        if isinstance(exc, MCPError):
            if exc.code == OVERSIZE_CODE or OVERSIZE_TAG in exc.message or _sse_too_big(exc):
                return McpError(r.MCP_OUTPUT_TOO_LARGE,
                                f"{what}: {exc.message}; ask for less output")
            if exc.code == CONNECTION_CLOSED:
                return await self._closed_during(what, exc.message, gen)
            # A refused tools/call is the tool failing; a refused tools/list is
            # a server that does not speak the part of MCP we need.
            code = r.MCP_PROTOCOL_ERROR if what == "tools/list" else r.MCP_TOOL_FAILED
            return McpError(code, f"{what}: server error {exc.code}: {exc.message}")
        if isinstance(exc, ValidationError | RuntimeError | ValueError):
            return McpError(r.MCP_PROTOCOL_ERROR, f"{what}: invalid reply: {str(exc)[:500]}")
        self._broken(gen)
        return McpError(r.MCP_SERVER_UNAVAILABLE, f"{what}: {type(exc).__name__}: {str(exc)[:500]}")

    async def _closed_during(self, what: str, message: str, gen: _Generation) -> McpError:
        """CONNECTION_CLOSED: over stdio the server is gone (the transport has
        already said so); over HTTP it may be one abandoned request while the
        session lives on, so only a dying generation is waited for."""
        dying = gen.scope.cancel_called
        if dying and gen.task is not None:
            await asyncio.wait({gen.task}, timeout=3.0)  # for the exit code and stderr
        why = (gen.reason or gen.info.describe_exit()) if dying else message
        return McpError(r.MCP_SERVER_UNAVAILABLE,
                        f"server {self.server_id!r} closed the connection during {what}: {why}")


def _sse_too_big(exc: MCPError) -> bool:
    # The SDK reports an SSE event over `max_sse_event_size` as a closed
    # connection carrying httpx2's message; it is our cap, not a dead server.
    return exc.code == CONNECTION_CLOSED and "exceeded the" in exc.message \
        and "byte limit" in exc.message
