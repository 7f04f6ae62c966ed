"""A batch of parallel tool calls at the edges of what the host allows: the
deadline of the guest tool whose nested send made the batch, and a process
that cannot start one more thread. A real guest (probe.wat), the loopback
OpenAI-compatible server, real Python functions; no assertion is timed (a
join bound only guards against a hang)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

from spearpy import abi
from spearpy.backends.scripted.script import Script
from spearpy.context import RunOptions
from spearpy.host import Host
from spearpy.observe import events as ev
from spearpy.observe.events import Event
from spearpy.testing import ScriptedServer
from spearpy.tools.python import PythonTools
from tests.probe import Probe, tool_schema, wat_module

HANG_GUARD_S = 30.0  # only a hung send waits that long
TOOL_TIMEOUT_S = 1.0
REENTER = 8  # probe.wat's table index of the tool that sends on another session
# probe.wat's reenter tool, sending with auto tool calls: a sub-agent inside a tool.
NESTED_AUTO = {"(call $cchat_send (global.get $reenter_fd) (i32.const 0))":
               f"(call $cchat_send (global.get $reenter_fd) (i32.const {abi.SEND_AUTO_TOOL_CALL}))"}


class Blocked:
    """A Python tool that returns only once released (at the test's end)."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.started = threading.Event()

    def block(self, i: int) -> str:
        self.started.set()
        self.release.wait(120.0)
        return f"released {i}"


def count(i: int) -> str:
    return f"count {i}"


def _tools(blocked: Blocked) -> PythonTools:
    tools = PythonTools()
    ints = {"type": "object", "properties": {"i": {"type": "integer"}}}
    tools.add(blocked.block, name="block", parameters=ints)
    tools.add(count, parameters=ints)
    return tools


def _calls(*calls: tuple[str, dict[str, Any]]) -> dict[str, Any]:
    return {"tool_calls": [{"name": name, "arguments": args, "id": f"c{k}"}
                           for k, (name, args) in enumerate(calls)]}


@pytest.fixture
def blocked() -> Iterator[Blocked]:
    gate = Blocked()
    yield gate
    gate.release.set()


def _strays_back_to(base: int) -> None:
    """Wait (bounded) until the calls this test abandoned returned, so the
    process-wide count of abandoned calls is as other tests expect it."""
    from spearpy.driver import parallel

    pause = threading.Event()
    for _ in range(1000):
        if parallel._STRAYS.count <= base:
            return
        pause.wait(0.01)


def test_a_batch_inside_a_tool_ends_its_stuck_python_call_at_the_tool_deadline(
        blocked: Blocked) -> None:
    """A guest tool under tool_timeout runs a sub-agent whose reply asks for
    two Python calls at once, one of which never returns. At the tool's
    deadline that call is answered tool_exec_failed, as the guest tool
    itself is (the code a call cut by the tool deadline gets), its worker
    abandoned; the batch, the nested send and the outer send go on."""
    from spearpy.driver import parallel

    base = parallel._STRAYS.count
    script = {"rules": [
        {"when": {"last_user_contains": "inner", "no_tool_message": True},
         "reply": _calls(("block", {"i": 0}), ("count", {"i": 1}))},
        {"when": {"last_user_contains": "outer", "no_tool_message": True},
         "reply": _calls(("reenter", {}))},
    ], "default": {"content": "done"}}
    events: list[Event] = []
    outcome: dict[str, Any] = {}
    with ScriptedServer(script) as server, \
            Host(cache_dir=None, model="m", max_retries=0, base_url=server.base_url,
                 api_key_env="", python_tools=_tools(blocked)) as host:
        server.script = Script.load(script)
        options = RunOptions(capture_output=True, sinks=[events.append],
                             limits={"tool_timeout": TOOL_TIMEOUT_S})
        probe = Probe(host, wat_module("probe.wat", NESTED_AUTO), options)

        def send() -> None:
            try:
                fd = probe.hc("cchat_create")
                assert probe.write_fn(fd, REENTER, tool_schema("reenter")) == 0
                assert probe.write_msg(fd, "user", "outer") == 0
                inner = probe.hc("cchat_create")
                assert probe.write_msg(inner, "user", "inner") == 0
                probe.call("set_reenter_fd", inner)
                outcome["body"] = probe.recv_json(
                    probe.hc("cchat_send", fd, abi.SEND_AUTO_TOOL_CALL))
            except BaseException as exc:  # reported below, on the test's thread
                outcome["error"] = exc

        sender = threading.Thread(target=send, daemon=True)
        sender.start()
        sender.join(HANG_GUARD_S)
        hung = sender.is_alive()
        strays = parallel._STRAYS.count
        blocked.release.set()
        sender.join(HANG_GUARD_S)
        probe.close()
        requests = list(server.requests)
    _strays_back_to(base)
    assert not hung, "the batch waited past the tool deadline for its stuck Python call"
    assert "error" not in outcome, outcome.get("error")
    assert outcome["body"]["choices"][0]["message"]["content"] == "done", outcome["body"]
    ends = {(e.data["name"], e.data["tool_call_id"]): e.data for e in events
            if e.kind == ev.TOOL_END}
    stuck, quick = ends[("block", "c0")], ends[("count", "c1")]
    tool = ends[("reenter", "c0")]
    assert stuck["executed"] and stuck["error"] == abi.TOOL_EXEC_FAILED, stuck
    assert quick["error"] is None, quick
    assert strays == base + 1  # the stuck call, abandoned on its worker until released
    # The guest tool returned (the epoch may or may not have cut it first)
    # and the outer send went on to its answer.
    assert tool["executed"], tool
    assert [m["role"] for m in requests[-1].body["messages"]][-1] == "tool"
