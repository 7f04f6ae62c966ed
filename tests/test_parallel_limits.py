"""A batch of parallel tool calls at the edges of what the host allows: the
deadline of the guest tool whose nested send made the batch, and a process
that cannot start one more thread. A real guest (probe.wat), the loopback
OpenAI-compatible server, real Python functions; no assertion is timed (a
join bound only guards against a hang)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
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
from tests.test_parallel_tools import _strays_at_most, tool_calls

ROOT = Path(__file__).resolve().parents[1]
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


@pytest.fixture
def blocked() -> Iterator[Blocked]:
    gate = Blocked()
    yield gate
    gate.release.set()


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
         "reply": tool_calls(("block", {"i": 0}), ("count", {"i": 1}))},
        {"when": {"last_user_contains": "outer", "no_tool_message": True},
         "reply": tool_calls(("reenter", {}))},
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
    _strays_at_most(base)  # the released call returned: the count is as other tests expect it
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


# Run in a process of its own: once it has its Host and guest, it caps its
# address space just above what it maps and asks 1 GiB of stack for each new
# thread, so no thread can start in it any more (RLIMIT_AS binds root too,
# where RLIMIT_NPROC does not); then a reply asks for two Python calls.
_NO_THREADS_CHILD = """
import json, sys, threading
from spearpy import abi
from spearpy.context import RunOptions
from spearpy.host import Host
from spearpy.tools.python import PythonTools
from tests.probe import Probe, wat_module
from tests.thread_room import use_up_thread_room

def count(i: int) -> str:
    return f"count {i}"

tools = PythonTools()
tools.add(count, parameters={"type": "object", "properties": {"i": {"type": "integer"}}})
events = []
with Host(cache_dir=None, model="m", max_retries=0, base_url=sys.argv[1], api_key_env="",
          python_tools=tools) as host:
    cancel = threading.Event() if sys.argv[2] == "cancellable" else None
    probe = Probe(host, wat_module("probe.wat"),
                  RunOptions(capture_output=True, sinks=[events.append], cancel=cancel))
    fd = probe.hc("cchat_create")
    assert probe.write_msg(fd, "user", "go") == 0
    report = {"thread_started": use_up_thread_room()}
    try:
        report["body"] = probe.recv_json(probe.hc("cchat_send", fd, abi.SEND_AUTO_TOOL_CALL))
    except BaseException as exc:
        report["error"] = f"{type(exc).__name__}: {exc}"[:2000]
    report["tools"] = [[e.kind, e.data["tool_call_id"], e.data.get("error")] for e in events
                       if e.kind in ("tool_start", "tool_end")]
    print(json.dumps(report))
"""


@pytest.mark.parametrize("run", ["plain", "cancellable"])
def test_a_call_whose_worker_thread_cannot_start_is_answered_and_the_run_goes_on(
        run: str) -> None:
    """A process at its limit cannot start the thread a call would run on:
    that call is answered tool_exec_failed (its tool_end follows its
    tool_start) and the send goes on to the model's answer, instead of the
    error escaping the hostcall and crashing the run. A run that can be
    cancelled waits for each completion on a worker thread too: with none
    to be had, the completion runs on the run's own thread."""
    script = {"rules": [{"when": {"no_tool_message": True},
                         "reply": tool_calls(("count", {"i": 0}), ("count", {"i": 1}))}],
              "default": {"content": "done"}}
    with ScriptedServer(script) as server:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(
            p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)}
        child = subprocess.run([sys.executable, "-c", _NO_THREADS_CHILD, server.base_url, run],
                               capture_output=True, text=True, cwd=ROOT, env=env,
                               timeout=HANG_GUARD_S * 4)
        requests = list(server.requests)
    assert child.returncode == 0, child.stderr[-3000:]
    report = json.loads(child.stdout.splitlines()[-1])
    assert report["thread_started"] is False  # the limit binds this process
    assert "error" not in report, report["error"]
    answers = [[m["tool_call_id"], json.loads(m["content"])["error"]]
               for m in requests[-1].body["messages"] if m["role"] == "tool"]
    assert report["body"]["choices"][0]["message"]["content"] == "done", report["body"]
    assert report["tools"] == [["tool_start", "c0", None], ["tool_start", "c1", None],
                               ["tool_end", "c0", abi.TOOL_EXEC_FAILED],
                               ["tool_end", "c1", abi.TOOL_EXEC_FAILED]], report["tools"]
    for _cid, error in answers:
        assert error["code"] == abi.TOOL_EXEC_FAILED and "thread" in error["message"], error
