"""T: parallel tool calls. One loop iteration whose model asks for four
calls of an MCP tool that sleeps 50 ms (the SDK-written toolbox over stdio,
tool `sleep`), against one iteration with one such call: with the calls run
at once the four cost about one. Each send is that iteration and the final
completion, from an in-process model, so the ratio is the tool calls' wall
time plus the same fixed cost on both sides.

Information beside it: the same four calls with max_parallel_tools=1 (one
after another, as before parallel calls), ~4x.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from bench.fakemodel import answer
from bench.guests import LiveGuest
from bench.stats import Row, Target, interleaved
from bench.upstream import install_backend
from spearpy import _native
from spearpy.backends.base import CompletionRequest
from spearpy.chat.protocol import CompletionResult
from spearpy.host import Host
from spearpy.mcp.naming import spear_tool_name

TOOLBOX = Path(__file__).resolve().parent.parent / "tests" / "mcp_servers" / "toolbox.py"
RECORD = {"server_id": "tb", "transport": "stdio", "allowed_tools": ["sleep"],
          "stdio": {"command": sys.executable, "args": [str(TOOLBOX)]}}
TASK = {"mcp.enabled": True, "mcp.default_server_ids": ["tb"]}
SLEEP = spear_tool_name("tb", "sleep")
SECONDS = 0.05


class SleepModel:
    """An in-process model asking, in one message, for `calls` sleeps."""

    name = "inprocess"
    default_model = "bench"

    def __init__(self) -> None:
        self.calls = 1

    def complete(self, request: CompletionRequest) -> CompletionResult:
        if not any(m.get("role") == "tool" for m in request.messages):
            message: dict[str, Any] = {"role": "assistant", "content": None, "tool_calls": [
                {"id": f"call_{i}", "type": "function",
                 "function": {"name": SLEEP, "arguments": f'{{"seconds":{SECONDS}}}'}}
                for i in range(self.calls)]}
        else:
            message = {"role": "assistant", "content": "done"}
        return answer(request.model, message)

    def close(self) -> None:
        pass


def run(quick: bool) -> list[Row]:
    from spearpy.observe.logs import configure_logging

    configure_logging(level="warning", defer=True)
    repeats = 7 if quick else 25
    host = Host(cache_dir=None, model="bench", base_url="http://127.0.0.1:9/v1",
                mcp_servers=[RECORD], task_params=TASK)
    model = SleepModel()
    install_backend(host, model)
    guest = LiveGuest(host)
    guest.run.options.task = host.task_policy
    used: list[int] = []

    def send(calls: int, parallel: int | None = None) -> None:
        model.calls = calls
        fd = guest.session(tools=False)
        if parallel is not None:
            guest.set_param(fd, "max_parallel_tools", parallel)
        guest.write_msg(fd, "user", "sleep")
        rfd = guest.send(fd)
        used.extend((fd, rfd))
        reply = guest.recv(rfd)
        if b"done" not in reply:
            raise RuntimeError(f"the loop did not finish: {reply[:300]!r}")

    def tidy() -> None:
        for fd in used:
            guest.close_fd(fd)
        used.clear()

    previous = _native.enter_run(guest.run)
    try:
        send(1)  # starts the server and fills the tool cache
        tidy()
        timed = interleaved({"one": lambda: send(1), "four": lambda: send(4),
                             "four_serial": lambda: send(4, 1)},
                            batch=1, repeats=repeats, between=tidy)
    finally:
        _native.enter_run(previous)
        guest.close()
        host.close()
    return [
        Row("T.parallel_4x50ms", "T",
            "loop iteration asking for 4 MCP calls of 50 ms (max_parallel_tools 8)",
            "the same iteration asking for 1 such call", "ms", timed["four"], timed["one"],
            Target("<=", 1.3, "<= 1.3"),
            note="SDK toolbox over stdio, tool sleep(0.05); in-process model"),
        Row("T.serial_4x50ms", "T", "the 4 calls with max_parallel_tools 1 (one by one)",
            "the same iteration asking for 1 such call", "ms", timed["four_serial"],
            timed["one"], note="information: what the 4 calls cost run one after another"),
    ]
