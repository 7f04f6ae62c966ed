"""`spearpy mcp serve`: a guest's registered tools as an MCP server.

The guest runs in the background (`Host.start`) with a send hook: its
registration (`_start`/main, or the export `--invoke` names) runs until its
first `cchat_send`, where the hook (`bridge.GuestBridge`) takes the tools it
registered on that session and keeps the guest there, running calls. The
server is the SDK's low-level `Server`: the guest's JSON schema is each
tool's `inputSchema`, and a `tools/call` is queued to the guest's thread and
awaited, so any number of MCP requests share one single-threaded wasm store.
A call that traps, times out or fails its checks is an `isError` result in
the loop's error shape; only that call fails.

Over stdio the protocol owns this process's stdin and stdout: `claim_stdio`
moves them aside before the guest starts, so whatever the guest (or a stray
print) writes to fd 1 lands on stderr, not on the wire.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import io
import os
import signal
import socket
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, cast

import anyio
import anyio.to_thread
import mcp_types as types
import uvicorn
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server
from mcp.shared.exceptions import MCPError

from spearpy import abi
from spearpy.chat.session import tool_error_content
from spearpy.embed import start_run
from spearpy.mcp.bridge import BridgeClosed, GuestBridge, GuestTool

if TYPE_CHECKING:
    from spearpy.embed import RunHandle
    from spearpy.host import Host, LoadedModule
    from spearpy.instance import SendHook
    from spearpy.outcome import RunResult

# A serving guest runs one call at a time: without a per-call deadline one
# spinning tool would hold every later call forever.
DEFAULT_TOOL_TIMEOUT_S = 30.0
DEFAULT_START_TIMEOUT_S = 30.0
STOP_GRACE_S = 5.0


class ServeError(Exception):
    """The guest cannot be served (it ended or hung before its first send)."""


class GuestToolServer:
    """One guest held at its first send, and the MCP server over its tools."""

    def __init__(self, host: Host, module: str | os.PathLike[str] | bytes | LoadedModule,
                 argv: list[str] | tuple[str, ...] = (), *, invoke: str | None = None,
                 env: Mapping[str, str | None] | None = None,
                 dirs: list[tuple[str, str]] | None = None, name: str = "spearpy-guest",
                 start_timeout: float = DEFAULT_START_TIMEOUT_S) -> None:
        self._host = host
        self._module = module
        self._argv = list(argv)
        self._run_kwargs: dict[str, Any] = {"invoke": invoke, "env": env, "dirs": dirs}
        self.name = name
        self._start_timeout = start_timeout
        self._bridge = GuestBridge()
        self._handle: RunHandle | None = None
        self.tools: list[GuestTool] = []

    # ---- the guest --------------------------------------------------------

    def start(self) -> list[GuestTool]:
        """Run the guest's registration; its tools once it reaches its first send.
        Raises ServeError when it ends, or takes longer than `start_timeout`, first."""
        limits = {} if self._host.config.tool_timeout is not None else {
            "tool_timeout": DEFAULT_TOOL_TIMEOUT_S}
        handle = self._handle = _start_run(
            self._host, self._module, self._argv, self._bridge.hook, capture_output=False,
            limits=limits or None, **self._run_kwargs)
        handle.add_done_callback(lambda h: self._bridge.run_ended(_ended(h)))
        end = time.monotonic() + self._start_timeout
        while not self._bridge.wait_ready(0.02):
            if handle.done():
                raise ServeError(f"the guest ended before its first cchat_send: {_ended(handle)}")
            if time.monotonic() >= end:
                handle.cancel()
                raise ServeError(f"the guest did not reach its first cchat_send within "
                                 f"{self._start_timeout:g}s")
        self.tools = list(self._bridge.tools)
        if not self.tools:
            self.close()
            raise ServeError("the guest registered no tool on the session it first sent")
        return self.tools

    def close(self, grace: float = STOP_GRACE_S) -> RunResult | None:
        """End the held send (the run ends as cancelled) and wait for the run."""
        self._bridge.stop()
        handle = self._handle
        if handle is None:
            return None
        try:
            return handle.result(grace)
        except TimeoutError:
            handle.cancel()  # stuck in a tool: the epoch tick stops it
            with contextlib.suppress(Exception):
                return handle.result(grace)
        except Exception:  # the run's own failure was already reported to callers
            return None
        return None

    def __enter__(self) -> GuestToolServer:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    # ---- the MCP side ------------------------------------------------------

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> types.CallToolResult:
        """Run one call on the guest's thread and wait for it without
        blocking the event loop; cancelling the waiter drops a queued call."""
        if name not in {tool.name for tool in self.tools}:
            raise MCPError(types.INVALID_PARAMS, f"unknown tool: {name}")
        try:
            answer = await asyncio.wrap_future(self._bridge.submit(name, arguments))
        except BridgeClosed as exc:
            text = tool_error_content(abi.TOOL_EXEC_FAILED, f"the guest is not running: {exc}")
            return types.CallToolResult(content=[types.TextContent(text=text)], is_error=True)
        return types.CallToolResult(content=[types.TextContent(text=answer.content)],
                                    is_error=answer.is_error)

    def mcp_server(self) -> Server[Any]:
        listed = types.ListToolsResult(tools=[
            types.Tool(name=t.name, description=t.description, input_schema=t.input_schema)
            for t in self.tools])

        async def list_tools(_ctx: Any, _params: Any) -> types.ListToolsResult:
            return listed

        async def call_tool(_ctx: Any, params: types.CallToolRequestParams,
                            ) -> types.CallToolResult:
            return await self.call_tool(params.name, params.arguments or {})

        return Server(self.name, version=_version(), on_list_tools=list_tools,
                      on_call_tool=call_tool)

    async def serve_stdio(self, wire: tuple[int, int]) -> None:
        """Serve over the (stdin, stdout) fds `claim_stdio` kept, until the
        client closes stdin or a signal arrives."""
        server = self.mcp_server()
        stdin = _Lines(io.TextIOWrapper(os.fdopen(wire[0], "rb", closefd=False),
                                        encoding="utf-8", errors="replace"))
        stdout = anyio.wrap_file(io.TextIOWrapper(os.fdopen(wire[1], "wb", closefd=False),
                                                  encoding="utf-8"))
        with anyio.CancelScope() as scope, _stop_on_signals(scope.cancel):
            async with stdio_server(stdin=cast(Any, stdin), stdout=stdout) as (read, write):
                await server.run(read, write, server.create_initialization_options())

    async def serve_http(self, sock: socket.socket) -> None:
        """Serve streamable HTTP at /mcp on a bound socket until a signal."""
        app = self.mcp_server().streamable_http_app(host=sock.getsockname()[0])
        web = _Uvicorn(uvicorn.Config(app, log_level="warning", lifespan="on",
                                      timeout_graceful_shutdown=2))
        with _stop_on_signals(lambda: setattr(web, "should_exit", True)):
            await web.serve(sockets=[sock])


def serve(server: GuestToolServer, http: str | None = None,
          announce: Callable[[str], None] | None = None) -> RunResult | None:
    """Start the guest, serve its tools over stdio (or streamable HTTP on
    `http`, HOST:PORT), and stop the guest when the server ends. Returns how
    the run ended. `announce` gets one line saying what is served where."""
    say = announce or (lambda _line: None)
    if http is not None:
        sock = bind(http)
        try:
            tools = server.start()
            host, port = sock.getsockname()[:2]
            say(f"serving {_names(tools)} on http://{_netloc(host, port)}/mcp")
            anyio.run(server.serve_http, sock)
        finally:
            sock.close()
            result = server.close()
        return result
    with claim_stdio() as wire:
        try:
            tools = server.start()
            say(f"serving {_names(tools)} over stdio")
            anyio.run(server.serve_stdio, wire)
        finally:
            result = server.close()
    return result


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
    import threading

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


@contextlib.contextmanager
def claim_stdio() -> Iterator[tuple[int, int]]:
    """Keep the protocol's stdin/stdout on private fds and point fd 0 at
    /dev/null and fd 1 at stderr while serving, so a guest's printf (wasmtime
    writes to fd 1) can never corrupt the wire. Restored on exit."""
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


def bind(address: str) -> socket.socket:
    """A listening socket for HOST:PORT (PORT 0: any free port)."""
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"expected HOST:PORT, got {address!r}")
    host = host.strip("[]") or "127.0.0.1"
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, int(port)))
        sock.listen(128)
    except OSError:
        sock.close()
        raise
    sock.set_inheritable(True)
    return sock


def _start_run(host: Host, module: str | os.PathLike[str] | bytes | LoadedModule,
               argv: list[str], hook: SendHook, **kwargs: Any) -> RunHandle:
    if "send_hook" in inspect.signature(host.run).parameters:
        return host.start(module, argv, send_hook=hook, **kwargs)
    # Until Host.run takes a send hook itself: the same run, options built here.
    return start_run(cast(Any, _HookedHost(host, hook)), module, argv, **kwargs)


class _HookedHost:
    def __init__(self, host: Host, hook: SendHook) -> None:
        self._host, self._hook = host, hook

    def run(self, module: str | os.PathLike[str] | bytes | LoadedModule, argv: list[str], *,
            cancel: Any, invoke: str | None, env: Mapping[str, str | None] | None,
            dirs: list[tuple[str, str]] | None, capture_output: bool,
            limits: dict[str, Any] | None) -> RunResult:
        from spearpy.instance import GuestRun, RunOptions

        options = RunOptions(argv=list(argv), env=dict(env) if env else None,
                             dirs=list(dirs or []), invoke=invoke, capture_output=capture_output,
                             cancel=cancel, limits=limits, send_hook=self._hook)
        return GuestRun(self._host, self._host.load(module), options).execute()


def _ended(handle: RunHandle) -> str:
    try:
        result = handle.result(0)
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    detail = f": {result.message}" if result.message else ""
    return f"{result.outcome} (exit {result.exit_code}){detail}"


def _names(tools: list[GuestTool]) -> str:
    return f"{len(tools)} tool{'s' if len(tools) != 1 else ''} ({', '.join(t.name for t in tools)})"


def _netloc(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _version() -> str:
    import importlib.metadata

    try:
        return importlib.metadata.version("spearpy")
    except importlib.metadata.PackageNotFoundError:
        return "0"
