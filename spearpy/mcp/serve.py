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

Over stdio the wire is moved off fd 1 before the guest starts
(`wire.claim_stdio`), so whatever the guest prints lands on stderr.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import anyio
import mcp_types as types
from mcp.server.lowlevel import Server
from mcp.shared.exceptions import MCPError

from spearpy import abi
from spearpy.chat.session import tool_error_content
from spearpy.errors import SpearpyError
from spearpy.mcp import wire
from spearpy.mcp.bridge import BridgeClosed, GuestBridge, GuestTool

if TYPE_CHECKING:
    from spearpy.context import SendHook
    from spearpy.embed import RunHandle
    from spearpy.host import Host, LoadedModule
    from spearpy.outcome import RunResult

# A serving guest runs one call at a time: without a per-call deadline one
# spinning tool would hold every later call forever.
DEFAULT_TOOL_TIMEOUT_S = 30.0
DEFAULT_START_TIMEOUT_S = 30.0
STOP_GRACE_S = 5.0


class ServeError(SpearpyError):
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


def serve(server: GuestToolServer, http: str | None = None,
          announce: Callable[[str], None] | None = None,
          token: str | None = None) -> RunResult | None:
    """Start the guest, serve its tools over stdio (or streamable HTTP on
    `http`, HOST:PORT, every request needing `token` as a bearer when given;
    anything but loopback needs one), and stop the guest when the server
    ends. Returns how the run ended. `announce` gets one line saying what is
    served where."""
    say = announce or (lambda _line: None)
    if http is not None:
        sock = wire.bind(http, token)
        try:
            tools = server.start()
            host, port = sock.getsockname()[:2]
            say(f"serving {_names(tools)} on http://{_netloc(host, port)}/mcp")
            anyio.run(wire.serve_http, server.mcp_server(), sock, token)
        finally:
            sock.close()
            result = server.close()
        return result
    with wire.claim_stdio() as fds:
        try:
            tools = server.start()
            say(f"serving {_names(tools)} over stdio")
            anyio.run(wire.serve_stdio, server.mcp_server(), fds)
        finally:
            result = server.close()
    return result


def _start_run(host: Host, module: str | os.PathLike[str] | bytes | LoadedModule,
               argv: list[str], hook: SendHook, **kwargs: Any) -> RunHandle:
    return host.start(module, argv, send_hook=hook, **kwargs)


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
