"""M: MCP tool calls. Every subject runs against the SDK-written toolbox
server over stdio (tests/mcp_servers/toolbox.py, tool `echo`, 200 B in/out),
each side with its own persistent session to its own process of that server.

(a) spearpy's McpManager.call_tool, and one auto-loop iteration whose tool is
    MCP (in-process fake model, slope between K_LO and K_HI rounds), vs the
    SDK's own ClientSession.call_tool awaited in its event loop;
(b) the same McpManager call vs SPEAR's spawn-per-call pattern (spawn,
    initialize, call, exit) with the SDK;
(also) the bridge alone (LoopThread.run of a no-op coroutine) against the same
    SDK call, for information: the share of a call that the thread hop is;
(c) offering the MCP tools for one send with a warm cache (HostTools.attach)
    vs one completion round trip to the loopback scripted server over the
    real HTTP backend (server in its own process).
"""

from __future__ import annotations

import asyncio
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.fakemodel import answer
from bench.guests import LiveGuest
from bench.stats import Row, Series, Target, interleaved
from bench.upstream import ServerProcess, install_backend
from spearpy import _native
from spearpy.backends.base import CompletionRequest
from spearpy.chat.protocol import CompletionResult
from spearpy.chat.session import ChatSession
from spearpy.host import Host
from spearpy.mcp.loop_thread import LoopThread
from spearpy.mcp.naming import spear_tool_name

TOOLBOX = Path(__file__).resolve().parent.parent / "tests" / "mcp_servers" / "toolbox.py"
RECORD = {"server_id": "tb", "transport": "stdio", "allowed_tools": ["echo"],
          "stdio": {"command": sys.executable, "args": [str(TOOLBOX)]}}
TASK = {"mcp.enabled": True, "mcp.default_server_ids": ["tb"]}
ECHO = spear_tool_name("tb", "echo")
TEXT = "x" * 200
K_LO, K_HI = 1, 6
PROMPT = "Echo the text."


class SdkSession:
    """The baseline: one SDK ClientSession over the SDK's stdio client, held
    open by an owner task on its own event loop; calls are awaited there, so
    only the SDK's own work is timed."""

    def __init__(self) -> None:
        self._loop = LoopThread("bench-sdk")
        self._stop: asyncio.Event | None = None
        self._session: Any = None
        ready = self._loop.submit(self._own())
        # The owner never returns while the session is open: wait for the session.
        deadline = time.monotonic() + 60
        while self._session is None:
            if ready.done():
                ready.result()  # raises what stopped the server
            if time.monotonic() > deadline:
                raise RuntimeError("the SDK session did not start")
            time.sleep(0.01)

    async def _own(self) -> None:
        from mcp.client.session import ClientSession
        from mcp.client.stdio import StdioServerParameters, stdio_client

        self._stop = asyncio.Event()
        params = StdioServerParameters(command=sys.executable, args=[str(TOOLBOX)])
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            self._session = session
            await self._stop.wait()

    def calls(self, n: int) -> float:
        """Seconds per call of `n` back-to-back calls, timed inside the loop."""
        async def batch() -> float:
            start = time.perf_counter()
            for _ in range(n):
                result = await self._session.call_tool("echo", {"text": TEXT})
                if result.is_error:
                    raise RuntimeError(f"the SDK call failed: {result}")
            return (time.perf_counter() - start) / n

        return self._loop.run(batch())

    def call_from_thread(self) -> None:
        """One call from this (sync) thread: what any sync program pays to
        use the SDK, one hop onto the loop and back per call."""
        result = self._loop.run(self._session.call_tool("echo", {"text": TEXT}))
        if result.is_error:
            raise RuntimeError(f"the SDK call failed: {result}")

    def close(self) -> None:
        async def stop() -> None:
            if self._stop is not None:
                self._stop.set()
            await asyncio.sleep(0.5)  # the owner leaves the transport, ending the server

        self._loop.stop(stop(), timeout=10)


def spawn_per_call() -> None:
    """SPEAR's pattern: a new server process for one call."""
    from mcp.client.session import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    async def once() -> None:
        params = StdioServerParameters(command=sys.executable, args=[str(TOOLBOX)])
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            result = await session.call_tool("echo", {"text": TEXT})
            if result.is_error:
                raise RuntimeError(f"the spawned call failed: {result}")

    asyncio.run(once())


class EchoModel:
    """An in-process model asking for the MCP echo tool `rounds` times."""

    name = "inprocess"
    default_model = "bench"

    def __init__(self) -> None:
        self.rounds = K_LO

    def complete(self, request: CompletionRequest) -> CompletionResult:
        done = sum(1 for m in request.messages if m.get("role") == "tool")
        if done < self.rounds:
            message: dict[str, Any] = {"role": "assistant", "content": None, "tool_calls": [
                {"id": f"call_{done}", "type": "function",
                 "function": {"name": ECHO, "arguments": f'{{"text":"{TEXT}"}}'}}]}
        else:
            message = {"role": "assistant", "content": "done"}
        return answer(request.model, message)

    def close(self) -> None:
        pass


def _per_call(series: Series, n: int) -> Series:
    return Series([s / n for s in series.samples])


def run(quick: bool) -> list[Row]:
    from spearpy.observe.logs import configure_logging

    configure_logging(level="warning", defer=True)  # servers' start lines stay off the table
    repeats, calls, spawns = (7, 20, 3) if quick else (25, 50, 8)
    sdk = SdkSession()
    host = Host(cache_dir=None, model="bench", base_url="http://127.0.0.1:9/v1",
                mcp_servers=[RECORD], task_params=TASK)
    model = EchoModel()
    install_backend(host, model)
    guest = LiveGuest(host)
    guest.run.options.task = host.task_policy
    # The manager the host's MCP tool source calls through (no public handle:
    # the bench times it alone, beside the loop that uses it).
    assert host.tools.mcp() is not None
    manager = host.tools._manager
    assert manager is not None
    ready: list[int] = []
    used: list[int] = []

    def manager_calls() -> None:
        for _ in range(calls):
            outcome = manager.call_tool("tb", "echo", {"text": TEXT})
            if outcome.is_error:
                raise RuntimeError(f"McpManager call failed: {outcome.content}")

    async def nothing() -> None:
        return None

    cancel = threading.Event()

    def hops() -> None:
        # The bridge alone, as a call uses it (a deadline and a cancel event):
        # the part of M.call.vs_sdk that the SDK awaited in its loop never pays.
        for _ in range(calls):
            manager._loop.run(nothing(), deadline=time.monotonic() + 30, cancel=cancel)

    def prepare() -> None:
        for fd in used:
            guest.close_fd(fd)
        used.clear()
        while len(ready) < 2:
            fd = guest.session(tools=False)
            guest.write_msg(fd, "user", PROMPT)
            ready.append(fd)

    def send(k: int) -> None:
        model.rounds = k
        fd = ready.pop()
        rfd = guest.send(fd)
        used.extend((fd, rfd))
        if b"done" not in guest.recv(rfd):
            raise RuntimeError("the loop did not finish")

    previous = _native.enter_run(guest.run)
    try:
        prepare()
        send(K_LO)  # starts the server and fills the tool cache
        sdk_calls: list[float] = []

        def sdk_op() -> None:
            sdk_calls.append(sdk.calls(calls))

        def sdk_from_thread() -> None:
            for _ in range(calls):
                sdk.call_from_thread()

        ops: dict[str, Callable[[], Any]] = {
            "manager": manager_calls, "sdk": sdk_op, "sdk_sync": sdk_from_thread, "hop": hops,
            f"loop@{K_LO}": lambda: send(K_LO), f"loop@{K_HI}": lambda: send(K_HI)}
        timed = interleaved(ops, batch=1, repeats=repeats, between=prepare)
        spawned = interleaved({"spawn": spawn_per_call}, batch=1, repeats=spawns, warmup=0)
        attach = _attach_vs_completion(host, repeats)
    finally:
        _native.enter_run(previous)
        guest.close()
        host.close()
        sdk.close()
    ours = _per_call(timed["manager"], calls)
    baseline = Series(sdk_calls[-repeats:])  # timed in the SDK's loop, warm-up left out
    loop_iter = Series([(hi - lo) / (K_HI - K_LO) for lo, hi in zip(
        timed[f"loop@{K_LO}"].samples, timed[f"loop@{K_HI}"].samples, strict=True)])
    return [
        Row("M.call.vs_sdk", "M", "McpManager.call_tool (echo, 200 B)",
            "SDK ClientSession.call_tool, same server", "us", ours, baseline,
            Target("<=", 1.2, "<= 1.2"), note="persistent stdio sessions, one process each"),
        Row("M.call.vs_sdk_from_thread", "M", "McpManager.call_tool (echo, 200 B)",
            "SDK ClientSession.call_tool from a sync thread (one hop per call)", "us", ours,
            _per_call(timed["sdk_sync"], calls),
            note="information: what spearpy adds beyond the thread hop any sync caller pays"),
        Row("M.bridge_hop.vs_sdk", "M", "the bridge alone: LoopThread.run of a no-op coroutine",
            "SDK ClientSession.call_tool, same server", "us", _per_call(timed["hop"], calls),
            baseline, note="information: the thread hop's share of a call"),
        Row("M.loop_iteration.vs_sdk", "M",
            "auto-loop iteration with an MCP tool (in-process model)",
            "SDK ClientSession.call_tool, same server", "us", loop_iter, baseline,
            Target("<=", 1.2, "<= 1.2"),
            note=f"slope between {K_LO} and {K_HI} tool rounds per send"),
        Row("M.call.vs_spawn_per_call", "M", "McpManager.call_tool (persistent session)",
            "spawn + initialize + call + exit (SPEAR's pattern)", "ms", ours, spawned["spawn"],
            Target("<=", 0.05, "<= 1/20 (>= 20x faster)"),
            extra={"speedup_p50": round(spawned["spawn"].p50 / ours.p50, 1)}),
        attach,
    ]


def _attach_vs_completion(host: Host, repeats: int) -> Row:
    """(c): the MCP part of preparing a send against one model round trip."""
    tools = host.tools
    policy = host.task_policy
    session = ChatSession(1)
    script = {"default": {"content": "ok"}}

    def attach() -> None:
        tools.attach(session, policy, deadline=None, cancel=None,
                     on_failure=lambda server, why: None)

    attach()
    offered = session.registry.specs()
    if not offered or offered[0]["function"]["name"] != ECHO:
        raise RuntimeError(f"the MCP tool was not offered: {offered}")
    with ServerProcess(script) as server:
        http = Host(cache_dir=None, model="bench", base_url=server.base_url, max_retries=0)
        backend, _error = http.backend_for(None)
        assert backend is not None
        request = CompletionRequest(model="bench", messages=[{"role": "user", "content": PROMPT}],
                                    tools=list(offered))
        try:
            timed = interleaved({"attach": attach, "complete": lambda: backend.complete(request)},
                                batch=10, repeats=repeats)
        finally:
            http.close()
    return Row("M.list_warm.vs_completion", "M",
               "offering MCP tools for a send (warm cache: HostTools.attach)",
               "one completion round trip (loopback server, HTTP backend)", "us",
               timed["attach"], timed["complete"], Target("<=", 0.05, "<= 5%"),
               note="server in its own process")
