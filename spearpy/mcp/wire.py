"""Where `spearpy mcp serve` listens: stdio kept off fd 1, or streamable HTTP
under the rule of every spearpy HTTP surface (web/guard.py).

Over stdio the protocol owns this process's stdin and stdout, but wasmtime
writes a guest's printf to fd 1: `claim_stdio` moves the wire to private fds
before the guest starts and points fd 1 at stderr. Both transports stop on
SIGINT/SIGTERM by returning, so the caller always gets to end the guest.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import os
import signal
import socket
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any, cast

import anyio
import anyio.to_thread
import uvicorn
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server
from mcp.server.transport_security import TransportSecuritySettings
from starlette.types import ASGIApp

from spearpy.observe.redact import Redactor
from spearpy.web.connections import connection_options
from spearpy.web.guard import JsonOnly, LoopbackOnly, TokenAuth, check_bind

TOKEN_ENV = "SPEARPY_MCP_TOKEN"

_HEAD_TIMEOUT_S = 10.0


async def serve_stdio(server: Server[Any], fds: tuple[int, int]) -> None:
    """Serve over the (stdin, stdout) fds `claim_stdio` kept, until the
    client closes stdin or a signal arrives."""
    stdin = _Lines(io.TextIOWrapper(os.fdopen(fds[0], "rb", closefd=False),
                                    encoding="utf-8", errors="replace"))
    stdout = anyio.wrap_file(io.TextIOWrapper(os.fdopen(fds[1], "wb", closefd=False),
                                              encoding="utf-8"))
    with anyio.CancelScope() as scope, _stop_on_signals(scope.cancel):
        async with stdio_server(stdin=cast(Any, stdin), stdout=stdout) as (read, write):
            await server.run(read, write, server.create_initialization_options())


async def serve_http(server: Server[Any], sock: socket.socket, token: str | None = None,
                     ) -> None:
    """Serve streamable HTTP at /mcp on a socket `bind` gave until a signal,
    under the rule of every spearpy HTTP surface (web/guard.py): `token` as
    a bearer on every request; without one, loopback Host and Origin only."""
    # The SDK's own Host check knows 127.0.0.1, localhost and ::1 only (it
    # refuses 127.0.0.2 and is off for any other address): the guard does it.
    sdk = server.streamable_http_app(
        transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False))
    redactor = Redactor([token] if token else [])
    app: ASGIApp = TokenAuth(JsonOnly(sdk, redactor, sdk.routes), token, redactor)
    if token is None:
        app = LoopbackOnly(app, redactor)
    # h11 with the service's bounds: a head's size and time, a connection cap
    # (spearpy/web/connections.py says why).
    web = _Uvicorn(uvicorn.Config(app, log_level="warning", lifespan="on",
                                  timeout_graceful_shutdown=2,
                                  **connection_options(None, _HEAD_TIMEOUT_S)))
    with _stop_on_signals(lambda: setattr(web, "should_exit", True)):
        await web.serve(sockets=[sock])


@contextlib.contextmanager
def claim_stdio() -> Iterator[tuple[int, int]]:
    """Keep the protocol's stdin/stdout on private fds and point fd 0 at
    /dev/null and fd 1 at stderr while serving. Restored on exit."""
    sys.stdout.flush()
    wire_in, wire_out = os.dup(0), os.dup(1)
    saved_in, saved_out = os.dup(0), os.dup(1)
    null = os.open(os.devnull, os.O_RDONLY)
    try:
        os.dup2(null, 0)
        os.dup2(2, 1)
        yield wire_in, wire_out
    finally:
        sys.stdout.flush()
        os.dup2(saved_in, 0)
        os.dup2(saved_out, 1)
        for fd in (null, saved_in, saved_out, wire_in, wire_out):
            with contextlib.suppress(OSError):
                os.close(fd)


def bind(address: str, token: str | None = None) -> socket.socket:
    """A listening socket for HOST:PORT (PORT 0: any free port); anything but
    loopback only with a token."""
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"expected HOST:PORT, got {address!r}")
    host = host.strip("[]") or "127.0.0.1"
    check_bind(host, token, f"--token or {TOKEN_ENV}")
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, int(port)))
        sock.listen(128)
    except OSError:
        sock.close()
        raise
    return sock


class _Uvicorn(uvicorn.Server):
    """uvicorn without its own signal capture: it re-raises a captured signal
    after stopping, and a SIGTERM would then kill the process before the
    guest's shutdown. `_stop_on_signals` handles them instead."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


class _Lines:
    """Lines of a blocking text stream for the SDK's stdio transport. Unlike
    anyio's file wrapper, a cancelled read is abandoned at once, so a signal
    ends the server without waiting for the client's next line."""

    def __init__(self, stream: io.TextIOWrapper) -> None:
        self._stream = stream

    def __aiter__(self) -> _Lines:
        return self

    async def __anext__(self) -> str:
        line = await anyio.to_thread.run_sync(self._stream.readline, abandon_on_cancel=True)
        if not line:
            raise StopAsyncIteration
        return line


@contextlib.contextmanager
def _stop_on_signals(stop: Callable[[], object]) -> Iterator[None]:
    """SIGINT/SIGTERM call `stop` (only the main thread can own signals)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    loop = asyncio.get_running_loop()
    signals = (signal.SIGINT, signal.SIGTERM)
    for sig in signals:
        loop.add_signal_handler(sig, stop)
    try:
        yield
    finally:
        for sig in signals:
            loop.remove_signal_handler(sig)
