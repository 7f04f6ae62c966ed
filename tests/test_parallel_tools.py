"""Parallel tool calls end to end: the calls of one reply that go to MCP
servers and Python tools run at once (bounded by max_parallel_tools), the
guest's stay on its thread, and the results reach the model in its order.
A real guest (probe.wat), the loopback OpenAI-compatible server, the
SDK-written toolbox MCP server over stdio, real Python functions.

No assertion here is timed: which calls overlap is made certain by the tools
themselves (each waits, with a generous bound, for what only concurrency
could bring about), and the bound fails the test when the calls run one by
one."""

from __future__ import annotations

import json
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import wasmtime

from spearpy import abi
from spearpy.backends.scripted.script import Script
from spearpy.context import RunOptions
from spearpy.guestcall import GuestTools
from spearpy.host import Host
from spearpy.mcp.naming import spear_tool_name
from spearpy.observe import events as ev
from spearpy.observe.events import Event
from spearpy.testing import ScriptedServer
from spearpy.tools.python import PythonTools
from tests.probe import Probe, tool_schema, wat_module

TOOLBOX = str(Path(__file__).parent / "mcp_servers" / "toolbox.py")
SLEEP = spear_tool_name("tb", "sleep")
ECHO = spear_tool_name("tb", "echo")
FAIL = spear_tool_name("tb", "fail")
SERVERS = [{"server_id": "tb", "transport": "stdio", "allowed_tools": ["*"],
            "stdio": {"command": sys.executable, "args": [TOOLBOX]}}]
TASK = {"mcp.enabled": True, "mcp.default_server_ids": ["tb"]}
BOUND_S = 10.0  # what a tool waits for another at most: only a failure waits that long
GUEST_ECHO = 0  # probe.wat's table index of its echo tool


class Gate:
    """What the Python tools of one test share, to prove their overlap:
    `ordered(i)` ends only after call i+1 ended (so four of them end in
    reverse order, and only if they run at once); `pair` waits until two run
    together; `count` does not wait. Each records how many ran at once and
    on which thread."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.changed = threading.Condition(self.lock)
        self.active = self.most = self.started = 0
        self.ended: list[int] = []
        self.threads: set[int] = set()
        self.release = threading.Event()

    def enter(self) -> None:
        with self.lock:
            self.active += 1
            self.started += 1
            self.most = max(self.most, self.active)
            self.threads.add(threading.get_ident())
            self.changed.notify_all()

    def leave(self) -> None:
        with self.lock:
            self.active -= 1
            self.changed.notify_all()


_GATES = [Gate()]


def _running(fn: Any) -> Any:
    def tool(**kwargs: Any) -> str:
        gate = _GATES[-1]
        gate.enter()
        try:
            result: str = fn(gate, **kwargs)
            return result
        finally:
            gate.leave()

    tool.__name__ = fn.__name__
    return tool


@_running
def ordered(gate: Gate, i: int, last: int) -> str:
    with gate.lock:
        gate.changed.wait_for(lambda: i == last or i + 1 in gate.ended, BOUND_S)
        gate.ended.append(i)
        gate.changed.notify_all()
    return f"ordered {i}"


@_running
def pair(gate: Gate, i: int, n: int) -> str:
    with gate.lock:
        gate.changed.wait_for(lambda: gate.active >= 2 or gate.started >= n, BOUND_S)
    return f"pair {i}"


@_running
def count(gate: Gate, i: int) -> str:
    return f"count {i}"


@_running
def block(gate: Gate, i: int) -> str:
    gate.release.wait(60.0)
    return f"released {i}"


BIG = 200_000  # characters a `big` call answers


@_running
def big(gate: Gate, i: int, n: int = BIG) -> str:
    return "x" * n


def boom(i: int) -> str:
    raise RuntimeError(f"call {i} failed")


def _python_tools() -> PythonTools:
    tools = PythonTools()
    ints = {"type": "object", "properties": {"i": {"type": "integer"}, "n": {"type": "integer"},
                                             "last": {"type": "integer"}}}
    for fn in (ordered, pair, count, block, big, boom):
        tools.add(fn, description=fn.__name__, parameters=ints)
    return tools


@pytest.fixture(scope="module")
def upstream() -> Iterator[ScriptedServer]:
    with ScriptedServer({"default": {"content": "idle"}}) as server:
        yield server


@pytest.fixture(scope="module")
def host(upstream: ScriptedServer) -> Iterator[Host]:
    """One Host for the module: its MCP session stays warm across tests."""
    with Host(cache_dir=None, model="m", max_retries=0, base_url=upstream.base_url,
              api_key_env="", python_tools=_python_tools(), mcp_servers=SERVERS,
              task_params=TASK) as shared:
        shared.upstream = upstream  # type: ignore[attr-defined]
        yield shared


@pytest.fixture
def gate() -> Iterator[Gate]:
    fresh = Gate()
    _GATES.append(fresh)
    yield fresh
    fresh.release.set()


def tool_calls(*calls: tuple[str, dict[str, Any]]) -> dict[str, Any]:
    """A scripted reply asking for these calls, ids c0, c1, ..."""
    return {"tool_calls": [{"name": n, "arguments": a, "id": f"c{k}"}
                           for k, (n, a) in enumerate(calls)]}


def calls_then_answer(*calls: tuple[str, dict[str, Any]]) -> dict[str, Any]:
    return {"rules": [{"when": {"tool_messages": 0}, "reply": tool_calls(*calls)}],
            "default": {"content": "done"}}


def send(host: Host, script: dict[str, Any], *, params: dict[str, Any] | None = None,
         limits: dict[str, Any] | None = None, guest_tools: bool = False,
         cancel: threading.Event | None = None, events: list[Event] | None = None,
         mcp: bool = True) -> tuple[dict[str, Any], list[Event], list[Any]]:
    server: ScriptedServer = host.upstream  # type: ignore[attr-defined]
    server.script = Script.load(script)
    server.clear_requests()
    events = [] if events is None else events
    probe = Probe.__new__(Probe)
    options = RunOptions(capture_output=True, sinks=[events.append],
                         task=host.task_policy if mcp else None,
                         limits=limits, cancel=cancel)
    Probe.__init__(probe, host, wat_module("probe.wat"), options)
    try:
        fd = probe.hc("cchat_create")
        if guest_tools:
            assert probe.write_fn(fd, GUEST_ECHO, tool_schema("echo", {
                "x": {"type": "integer"}})) == 0
        for key, value in (params or {}).items():
            assert probe.set_param(fd, key, value) == 0
        assert probe.write_msg(fd, "user", "go") == 0
        body = probe.recv_json(probe.hc("cchat_send", fd, abi.SEND_AUTO_TOOL_CALL))
    finally:
        probe.close()
    return body, events, list(server.requests)


def tool_messages(requests: list[Any]) -> list[tuple[str, str]]:
    messages = requests[-1].body["messages"]
    return [(m["tool_call_id"], m["content"]) for m in messages if m["role"] == "tool"]


def tool_events(events: list[Event], kind: str) -> list[dict[str, Any]]:
    return [e.data for e in events if e.kind == kind]


def test_results_reach_the_model_in_its_order_when_the_calls_end_in_reverse(
        host: Host, gate: Gate) -> None:
    script = calls_then_answer(*[("ordered", {"i": i, "last": 3}) for i in range(4)])
    body, events, requests = send(host, script)
    assert body["choices"][0]["message"]["content"] == "done", body
    assert gate.ended == [3, 2, 1, 0]  # only possible when all four ran at once
    assert tool_messages(requests) == [(f"c{i}", f"ordered {i}") for i in range(4)]
    ends = tool_events(events, ev.TOOL_END)
    assert [e["tool_call_id"] for e in ends] == ["c3", "c2", "c1", "c0"]
    starts = tool_events(events, ev.TOOL_START)
    assert [e["tool_call_id"] for e in starts] == ["c0", "c1", "c2", "c3"]
    assert all(e["parallel"] == 4 and e["executed"] for e in starts + ends)
    assert body["_spear"]["tool_calls"] == 4


def test_one_failing_call_among_four_keeps_the_others_results(
        host: Host) -> None:
    script = calls_then_answer((ECHO, {"text": "a"}), (FAIL, {"message": "it broke"}),
                               (ECHO, {"text": "c"}), ("boom", {"i": 3}))
    body, events, requests = send(host, script)
    assert body["choices"][0]["message"]["content"] == "done", body
    answers = dict(tool_messages(requests))
    assert list(answers) == ["c0", "c1", "c2", "c3"]
    assert answers["c0"] == "a" and answers["c2"] == "c"
    assert "it broke" in json.loads(answers["c1"])["error"]["message"]
    failed = json.loads(answers["c3"])["error"]
    assert failed["code"] == abi.TOOL_EXEC_FAILED and "call 3 failed" in failed["message"]
    errors = {e["tool_call_id"]: e["error"] for e in tool_events(events, ev.TOOL_END)}
    assert errors["c0"] is None and errors["c2"] is None
    assert errors["c1"] is not None and errors["c3"] == abi.TOOL_EXEC_FAILED


def test_a_cancel_ends_every_call_of_the_batch_and_answers_each(
        host: Host, gate: Gate) -> None:
    cancel = threading.Event()
    # Two blocked Python calls and an MCP call sleeping 30 s run; with a
    # limit of 3 the fourth never starts.
    script = calls_then_answer(("block", {"i": 0}), (SLEEP, {"seconds": 30}),
                               ("block", {"i": 2}), ("count", {"i": 3}))

    def cancel_when_running() -> None:
        with gate.lock:
            gate.changed.wait_for(lambda: gate.started >= 2, BOUND_S)
        cancel.set()

    canceller = threading.Thread(target=cancel_when_running, daemon=True)
    canceller.start()
    events: list[Event] = []
    ended: list[str] = []

    def run() -> None:
        try:
            send(host, script, params={"max_parallel_tools": 3}, cancel=cancel, events=events)
        except wasmtime.WasmtimeError as exc:  # the cancel ends the guest once the send returns
            ended.append(str(exc))

    sender = threading.Thread(target=run, daemon=True)
    sender.start()
    sender.join(BOUND_S * 2)  # a hang guard: the MCP call alone would take 30 s
    gate.release.set()
    assert not sender.is_alive(), "the send did not end on cancel"
    assert ended and "cancelled" in ended[0]
    send_end = [e.data for e in events if e.kind == ev.SEND_END]
    assert send_end[0]["error"] == "cancelled"
    starts = tool_events(events, ev.TOOL_START)
    ends = tool_events(events, ev.TOOL_END)
    # Every call has exactly one start and one end, run or not.
    assert sorted(e["tool_call_id"] for e in starts) == ["c0", "c1", "c2", "c3"]
    assert sorted(e["tool_call_id"] for e in ends) == ["c0", "c1", "c2", "c3"]
    by_id = {e["tool_call_id"]: e for e in ends}
    for cid in ("c0", "c2"):
        assert by_id[cid]["executed"] and by_id[cid]["error"] == "cancelled", by_id[cid]
    # The MCP call sees the same cancel: it ended on its own or was cut short.
    assert by_id["c1"]["executed"] and by_id["c1"]["error"] in ("cancelled", "mcp_cancelled")
    assert not by_id["c3"]["executed"] and by_id["c3"]["error"] == "cancelled"
    server: ScriptedServer = host.upstream  # type: ignore[attr-defined]
    assert len(server.requests) == 1  # nothing went upstream after the cancel


def test_the_run_deadline_ends_the_batch_and_abandons_a_python_call(
        host: Host, gate: Gate) -> None:
    """Two Python calls that would run for a minute: the run's deadline
    (5 s; MCP off, so no server start spends it) ends the send, each call
    answered with the timeout."""
    events: list[Event] = []
    ended: list[str] = []
    script = calls_then_answer(("block", {"i": 0}), ("block", {"i": 1}))
    try:
        send(host, script, limits={"timeout": 5.0}, events=events, mcp=False)
    except wasmtime.WasmtimeError as exc:  # the deadline ends the guest once the send returns
        ended.append(str(exc))
    assert gate.started == 2 and not gate.release.is_set()  # both still blocked
    assert ended and "deadline" in ended[0]
    ends = {e["tool_call_id"]: e for e in tool_events(events, ev.TOOL_END)}
    assert sorted(ends) == ["c0", "c1"]
    assert all(e["executed"] and e["error"] == "timeout" for e in ends.values()), ends
    assert [e.data["error"] for e in events if e.kind == ev.SEND_END] == ["timeout"]


def test_the_parallel_limit_is_honoured_and_a_guest_cannot_lift_the_hosts(
        host: Host, gate: Gate) -> None:
    script = calls_then_answer(*[("pair", {"i": i, "n": 6}) for i in range(6)])
    # The run allows 2; the guest asks for 6: the run's bound holds.
    body, events, requests = send(host, script, params={"max_parallel_tools": 6},
                                  limits={"max_parallel_tools": 2})
    assert body["choices"][0]["message"]["content"] == "done", body
    assert gate.most == 2 and gate.started == 6
    assert tool_messages(requests) == [(f"c{i}", f"pair {i}") for i in range(6)]
    # Never more than two started and not yet ended, as the events saw it.
    running = most = 0
    for event in events:
        if event.kind in (ev.TOOL_START, ev.TOOL_END):
            running += 1 if event.kind == ev.TOOL_START else -1
            most = max(most, running)
    assert most == 2


def test_the_session_param_lowers_the_bound(host: Host, gate: Gate) -> None:
    script = calls_then_answer(*[("pair", {"i": i, "n": 4}) for i in range(4)])
    body, _events, _requests = send(host, script, params={"max_parallel_tools": 2})
    assert body["choices"][0]["message"]["content"] == "done", body
    assert gate.most == 2


def test_max_parallel_tools_1_runs_the_calls_one_by_one_on_the_guests_thread(
        host: Host, gate: Gate) -> None:
    script = calls_then_answer(*[("count", {"i": i}) for i in range(4)],
                               (ECHO, {"text": "e"}))
    body, events, requests = send(host, script, params={"max_parallel_tools": 1})
    assert body["choices"][0]["message"]["content"] == "done", body
    assert gate.most == 1
    assert gate.threads == {threading.get_ident()}
    kinds = [(e.kind, e.data["tool_call_id"]) for e in events
             if e.kind in (ev.TOOL_START, ev.TOOL_END)]
    assert kinds == [(k, f"c{i}") for i in range(5) for k in (ev.TOOL_START, ev.TOOL_END)]
    assert all("parallel" not in e.data for e in events if e.kind == ev.TOOL_START)
    assert [cid for cid, _ in tool_messages(requests)] == [f"c{i}" for i in range(5)]


def test_guest_calls_stay_on_the_guests_thread_in_order_beside_the_others(
        host: Host, gate: Gate, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[tuple[int, str]] = []
    overlap = {"now": 0, "most": 0}
    real = GuestTools.call

    def spy(self: GuestTools, ref: Any, arguments: str, budget: Any) -> Any:
        overlap["now"] += 1
        overlap["most"] = max(overlap["most"], overlap["now"])
        seen.append((threading.get_ident(), arguments))
        try:
            return real(self, ref, arguments, budget)
        finally:
            overlap["now"] -= 1

    monkeypatch.setattr(GuestTools, "call", spy)
    script = calls_then_answer(("echo", {"x": 1}), ("pair", {"i": 1, "n": 2}), ("echo", {"x": 2}),
                               (SLEEP, {"seconds": 0.05}), ("pair", {"i": 4, "n": 2}),
                               ("echo", {"x": 3}))
    body, events, requests = send(host, script, guest_tools=True)
    assert body["choices"][0]["message"]["content"] == "done", body
    me = threading.get_ident()
    assert [args for _, args in seen] == ['{"x":1}', '{"x":2}', '{"x":3}']
    assert {thread for thread, _ in seen} == {me}
    assert overlap["most"] == 1
    assert gate.most == 2 and me not in gate.threads  # the Python calls ran beside
    assert tool_messages(requests) == [("c0", '{"x":1}'), ("c1", "pair 1"), ("c2", '{"x":2}'),
                                       ("c3", "slept 0.05"), ("c4", "pair 4"),
                                       ("c5", '{"x":3}')]
    sources = {e["tool_call_id"]: e["source"] for e in tool_events(events, ev.TOOL_START)}
    assert sources == {"c0": "guest", "c1": "python", "c2": "guest", "c3": "mcp",
                       "c4": "python", "c5": "guest"}


# ---- durable runs: a batch is journaled in the model's order ----------------------------

TALLY_SERVER = str(Path(__file__).parent / "mcp_servers" / "tally.py")
TALLY = spear_tool_name("tally", "tally")
# durable.wat sends twice; each reply asks for Python and MCP calls mixed.
DURABLE_SCRIPT = {
    "rules": [
        {"when": {"tool_messages": 0, "last_user_contains": "what time"},
         "reply": {"tool_calls": [{"name": "count", "arguments": {"i": 1}},
                                  {"name": TALLY, "arguments": {"text": "a"}},
                                  {"name": "count", "arguments": {"i": 2}},
                                  {"name": TALLY, "arguments": {"text": "b"}}]}},
        {"when": {"tool_messages": 0, "last_user_contains": "and now"},
         "reply": {"tool_calls": [{"name": TALLY, "arguments": {"text": "c"}},
                                  {"name": "count", "arguments": {"i": 3}}]}},
    ],
    "default": {"content": "done: {{last_tool}}"},
    "models": ["m"],
}


@pytest.fixture(scope="module")
def durable_world(tmp_path_factory: pytest.TempPathFactory,
                  ) -> Iterator[tuple[Host, ScriptedServer, Path, list[int]]]:
    where = tmp_path_factory.mktemp("parallel-durable")
    calls: list[int] = []
    tools = PythonTools()

    def count(i: int) -> str:
        """Count one call."""
        calls.append(i)
        return f"counted {i}"

    tools.add(count, parameters={"type": "object", "properties": {"i": {"type": "integer"}}})
    tally = where / "tally.txt"
    record = {"server_id": "tally", "transport": "stdio", "allowed_tools": ["*"],
              "stdio": {"command": sys.executable, "args": [TALLY_SERVER, str(tally)]}}
    with ScriptedServer(DURABLE_SCRIPT) as server, \
            Host(cache_dir=None, base_url=server.base_url, model="m", api_key_env="",
                 python_tools=tools, mcp_servers=[record],
                 task_params={"mcp.enabled": True, "mcp.default_server_ids": ["tally"]}) as host:
        yield host, server, tally, calls


def test_a_journaled_batch_replays_and_resumes_with_each_call_made_once(
        durable_world: tuple[Host, ScriptedServer, Path, list[int]],
        tmp_path: Path) -> None:
    from spearpy.durable import JournalSpec

    host, server, tally, calls = durable_world
    durable = wat_module("durable.wat")

    def asked() -> tuple[int, int, int]:
        tallied = tally.read_text().count("\n") if tally.exists() else 0
        return len(server.requests), len(calls), tallied

    events: list[Event] = []
    path = tmp_path / "full.jsonl"
    before = asked()
    first = host.run(durable, journal=JournalSpec(path), on_event=events.append)
    assert first.outcome == "exited", first.message
    total = tuple(a - b for a, b in zip(asked(), before, strict=True))
    assert total == (4, 3, 3)
    assert {e.data.get("parallel") for e in events if e.kind == ev.TOOL_START} == {4, 2}
    lines = path.read_text().splitlines()
    steps = [json.loads(line) for line in lines]
    outcomes = [s["answer"]["output"] for s in steps if s["kind"] == "tool.outcome"]
    # The model's order, whatever order the calls ended in.
    assert outcomes == ["counted 1", "tallied a", "counted 2", "tallied b", "tallied c",
                        "counted 3"]

    replay = tmp_path / "replay.jsonl"
    replay.write_text(path.read_text())
    before = asked()
    replayed = host.run(durable, journal=JournalSpec(replay, mode="replay"))
    assert replayed.outcome == "exited", replayed.message
    assert replayed.stdout == first.stdout
    assert asked() == before

    def kept_asks(kept: list[str]) -> tuple[int, int, int]:
        kinds = [json.loads(line) for line in kept]
        sources = [s["request"]["source"] for s in kinds if s["kind"] == "tool.outcome"]
        return (sum(s["kind"] == "chat.completion" for s in kinds),
                sources.count("python"), sources.count("mcp"))

    # A crash after any step leaves that many steps: the resumed run asks the
    # world only what they lack, so each call is made once over both runs.
    for k in range(1, len(lines) - 1):
        cut = tmp_path / f"cut{k}.jsonl"
        cut.write_text("\n".join(lines[:k + 1]) + "\n")
        before = asked()
        resumed = host.run(durable, journal=JournalSpec(cut))
        assert resumed.outcome == "exited", (k, resumed.message)
        again = tuple(a - b for a, b in zip(asked(), before, strict=True))
        kept = kept_asks(lines[:k + 1])
        assert again == tuple(t - j for t, j in zip(total, kept, strict=True)), k
        after = cut.read_text().splitlines()
        assert after[:k + 1] == lines[:k + 1] and len(after) == len(lines), k


MIXED_SCRIPT = {
    "rules": [
        {"when": {"tool_messages": 0},
         "reply": {"tool_calls": [{"name": "add", "arguments": {"a": 2, "b": 3}},
                                  {"name": "count", "arguments": {"i": 1}},
                                  {"name": "count", "arguments": {"i": 2}},
                                  {"name": "mul", "arguments": {"a": 5, "b": 4}},
                                  {"name": "count", "arguments": {"i": 3}},
                                  {"name": "upper", "arguments": {"text": "done"}}]}},
    ],
    "default": {"content": "answered: {{last_tool}}"},
}


def test_a_journaled_batch_mixing_guest_calls_resumes_anywhere_in_the_models_order(
        tmp_path: Path) -> None:
    """The guest's calls (c_multi_tool's add, mul, upper) between Python
    calls: the journal holds every outcome in the model's order, and a run
    cut at any step resumes making each Python call once."""
    from spearpy.durable import JournalSpec

    samples = Path(__file__).resolve().parents[1] / "wasm-samples"
    script = tmp_path / "mixed.json"
    script.write_text(json.dumps(MIXED_SCRIPT))
    calls: list[int] = []
    tools = PythonTools()

    def count(i: int) -> str:
        """Count one call."""
        calls.append(i)
        return f"counted {i}"

    tools.add(count, parameters={"type": "object", "properties": {"i": {"type": "integer"}}})
    module = str(samples / "c_multi_tool.wasm")
    with Host(cache_dir=None, backend=f"scripted:{script}", python_tools=tools) as host:
        events: list[Event] = []
        path = tmp_path / "full.jsonl"
        first = host.run(module, journal=JournalSpec(path), on_event=events.append)
        assert first.outcome == "exited", first.message
        assert sorted(calls) == [1, 2, 3]
        # A guest call of a journaled batch runs alone: count 1 and 2 overlap at most.
        assert {e.data.get("parallel") for e in events if e.kind == ev.TOOL_START} == {2}
        lines = path.read_text().splitlines()
        steps = [json.loads(line) for line in lines]
        order = [s["kind"] for s in steps if s["kind"] in ("tool.outcome", "guest_tool.output")]
        assert order == ["guest_tool.output", "tool.outcome", "tool.outcome",
                         "guest_tool.output", "tool.outcome", "guest_tool.output"]
        assert [s["answer"]["output"] for s in steps if s["kind"] == "tool.outcome"] == [
            "counted 1", "counted 2", "counted 3"]
        for k in range(1, len(lines) - 1):
            cut = tmp_path / f"cut{k}.jsonl"
            cut.write_text("\n".join(lines[:k + 1]) + "\n")
            kept = sum(json.loads(line)["kind"] == "tool.outcome" for line in lines[:k + 1])
            calls.clear()
            resumed = host.run(module, journal=JournalSpec(cut))
            assert resumed.outcome == "exited", (k, resumed.message)
            assert resumed.stdout == first.stdout, k
            assert len(calls) == 3 - kept, (k, calls)
        calls.clear()
        replayed = host.run(module, journal=JournalSpec(path, mode="replay"))
        assert replayed.outcome == "exited" and replayed.stdout == first.stdout
        assert calls == []


# ---- the loop alone: which calls a CallTools admits ---------------------------------------

def _loop_reply(names: list[str], arguments: list[str] | None = None, **limits: Any) -> Any:
    from spearpy.chat.loop import ToolLoop
    from spearpy.chat.protocol import CompletionResult, LoopLimits
    from spearpy.chat.registry import ToolRegistry
    from spearpy.chat.session import ChatSession

    tools = _python_tools()
    session = ChatSession(1)
    session.registry.attach("python", [
        ToolRegistry.build(name, name, spec, tools,
                           approval="ask" if name == "block" else "allow")
        for name, spec in tools.specs()])
    session.write_message("user", "go")
    loop = ToolLoop(session, LoopLimits(**limits), auto=True, backend="b", model="m")
    loop.next_action()
    message = {"role": "assistant", "content": "", "tool_calls": [
        {"id": f"c{k}", "type": "function",
         "function": {"name": name, "arguments": arguments[k] if arguments else '{"i": 1}'}}
        for k, name in enumerate(names)]}
    loop.on_completion(CompletionResult("b", "m", body={"choices": [{"message": message}]}))
    return loop


def _ids(action: Any) -> list[str]:
    from spearpy.chat.protocol import CallTool, CallTools

    if isinstance(action, CallTools):
        return [admitted.call.id for admitted in action.calls]
    assert isinstance(action, CallTool), action
    return [action.call.id]


def _ok(n: int) -> list[Any]:
    from spearpy.chat.protocol import ToolOutcome

    return [ToolOutcome(ok=True, output="fine") for _ in range(n)]


def test_admission_ends_at_a_call_that_does_not_simply_run() -> None:
    from spearpy.chat.protocol import CallTools

    loop = _loop_reply(["count", "count", "nope", "count", "count"], max_parallel_tools=4)
    first = loop.next_action()
    assert isinstance(first, CallTools) and _ids(first) == ["c0", "c1"]
    second = loop.on_tool_results(_ok(2), True)  # c2 (unknown) is answered on the way
    assert _ids(second) == ["c3", "c4"]
    loop.on_tool_results(_ok(2))
    tools = [m["tool_call_id"] for m in loop.session.messages if m["role"] == "tool"]
    assert tools == ["c0", "c1", "c2", "c3", "c4"]


def test_a_held_call_ends_admission_and_the_limit_is_per_call() -> None:
    from spearpy.chat.protocol import Done, Failed

    held = _loop_reply(["count", "count", "block", "count"], max_parallel_tools=8)
    assert _ids(held.next_action()) == ["c0", "c1"]
    assert isinstance(held.on_tool_results(_ok(2), True), Done)  # held at c2, c3 pending
    assert [c.id for c in held.session.pending_calls()] == ["c2", "c3"]
    limited = _loop_reply(["count"] * 5, max_parallel_tools=8, max_total_tool_calls=3)
    assert _ids(limited.next_action()) == ["c0", "c1", "c2"]
    ended = limited.on_tool_results(_ok(3), True)
    assert isinstance(ended, Failed) and ended.body["error"]["code"] == abi.SEND_TOOL_CALL_LIMIT
    assert limited.stats.tool_calls == 3


def test_a_call_the_batch_would_cache_waits_for_it_and_hits_the_cache() -> None:
    loop = _loop_reply(["count", "count", "pair"], max_parallel_tools=8,
                       cache_tool_results=True)
    assert _ids(loop.next_action()) == ["c0"]  # c1 is c0's cache key
    after = loop.on_tool_result("c0", _ok(1)[0], True)
    assert _ids(after) == ["c2"]  # c1 answered from the cache
    assert loop.stats.tool_calls == 2


def test_a_journal_resumes_under_another_max_parallel_tools(tmp_path: Path) -> None:
    """How many calls overlap changes no answer: a run journaled with
    max_parallel_tools 2 resumes on a host with the default (not a step-0
    mismatch), and with 1."""
    from spearpy.durable import JournalSpec

    module = str(Path(__file__).resolve().parents[1] / "wasm-samples" / "c_multi_tool.wasm")
    script = tmp_path / "mixed.json"
    script.write_text(json.dumps(MIXED_SCRIPT))
    tools = PythonTools()

    def count(i: int) -> str:
        """Count one call."""
        return f"counted {i}"

    tools.add(count, parameters={"type": "object", "properties": {"i": {"type": "integer"}}})
    path = tmp_path / "run.jsonl"
    with Host(cache_dir=None, backend=f"scripted:{script}", python_tools=tools,
              max_parallel_tools=2) as host:
        first = host.run(module, journal=JournalSpec(path))
    assert first.outcome == "exited", first.message
    lines = path.read_text().splitlines()
    for parallel in (8, 1):
        cut = tmp_path / f"cut{parallel}.jsonl"
        cut.write_text("\n".join(lines[:4]) + "\n")
        with Host(cache_dir=None, backend=f"scripted:{script}", python_tools=tools,
                  max_parallel_tools=parallel) as host:
            resumed = host.run(module, journal=JournalSpec(cut))
        assert resumed.outcome == "exited", (parallel, resumed.message)
        assert resumed.stdout == first.stdout


def test_a_guest_cannot_set_max_parallel_tools_to_nothing(host: Host) -> None:
    probe = Probe.__new__(Probe)
    Probe.__init__(probe, host, wat_module("probe.wat"), RunOptions(capture_output=True))
    try:
        fd = probe.hc("cchat_create")
        for bad in (0, -1, 1.5, True, "4"):
            assert probe.set_param(fd, "max_parallel_tools", bad) == abi.EINVAL, bad
        assert probe.set_param(fd, "max_parallel_tools", 1) == 0
    finally:
        probe.close()


def test_a_guest_call_ending_the_run_still_ends_each_running_call(
        host: Host, gate: Gate, monkeypatch: pytest.MonkeyPatch) -> None:
    """A guest call that ends the run by raising (as a run-ending interrupt
    inside it does) leaves no tool_start of the batch without its tool_end."""
    from spearpy.errors import HostInterrupt
    from spearpy.outcome import Outcome

    def ending(self: GuestTools, ref: Any, arguments: str, budget: Any) -> Any:
        with gate.lock:  # once the Python call runs beside it
            gate.changed.wait_for(lambda: gate.started >= 1, BOUND_S)
        raise HostInterrupt(Outcome.MEMORY_LIMIT, "the guest made the host keep too much")

    monkeypatch.setattr(GuestTools, "call", ending)
    events: list[Event] = []
    script = calls_then_answer(("block", {"i": 0}), ("echo", {"x": 1}))
    with pytest.raises(wasmtime.WasmtimeError):
        send(host, script, guest_tools=True, events=events, mcp=False)
    starts = [e["tool_call_id"] for e in tool_events(events, ev.TOOL_START)]
    ends = {e["tool_call_id"]: e for e in tool_events(events, ev.TOOL_END)}
    assert sorted(starts) == sorted(ends) == ["c0", "c1"]
    assert ends["c0"]["executed"] and ends["c0"]["error"] is not None


def test_admitting_a_reply_of_thousands_of_cached_calls_is_linear(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A model asking for max_total_tool_calls calls in one reply: checking
    each against the batch's cache keys compares keys about once a call,
    not once per call already admitted (n * n / 2: seconds of CPU for 10k)."""
    from spearpy.chat import batch
    from spearpy.chat.protocol import CallTools

    class Key:
        compared = 0

        def __init__(self, name: str, parsed: Any) -> None:
            self.value = (name, json.dumps(parsed, sort_keys=True))

        def __hash__(self) -> int:
            return hash(self.value)

        def __eq__(self, other: object) -> bool:
            Key.compared += 1
            return isinstance(other, Key) and self.value == other.value

    monkeypatch.setattr(batch, "cache_key", Key)
    n = 2000
    loop = _loop_reply(["count"] * n, [json.dumps({"i": i}) for i in range(n)],
                       max_parallel_tools=8, max_total_tool_calls=n, cache_tool_results=True)
    action = loop.next_action()
    assert isinstance(action, CallTools) and len(action.calls) == n
    assert Key.compared < n, Key.compared


def test_a_batch_stops_holding_outputs_past_max_host_bytes(
        host: Host, gate: Gate, monkeypatch: pytest.MonkeyPatch) -> None:
    """Forty calls answering 200 KB each in one reply, on a run that may
    keep 1 MiB: the batch holds every outcome until the reply is answered,
    so it notes memory_limit once they pass the budget and starts no more
    (calls made one by one stop one output past it); a batch of guest calls
    (run one by one, answered together) too."""
    from spearpy.chat.protocol import ToolOutcome

    n = 40
    params = {"max_total_tool_calls": n, "max_tool_output_bytes": 1 << 19}
    limits = {"max_host_bytes": 1 << 20}
    script = calls_then_answer(*[("big", {"i": i}) for i in range(n)])
    with pytest.raises(wasmtime.WasmtimeError, match="max_host_bytes"):
        send(host, script, params=params, limits=limits, mcp=False)
    assert 0 < gate.started < n // 2, gate.started

    guest_calls: list[str] = []

    def big_guest(self: GuestTools, ref: Any, arguments: str, budget: Any) -> ToolOutcome:
        guest_calls.append(arguments)
        return ToolOutcome(ok=True, output="y" * BIG)

    monkeypatch.setattr(GuestTools, "call", big_guest)
    script = calls_then_answer(*[("echo", {"x": i}) for i in range(n)])
    with pytest.raises(wasmtime.WasmtimeError, match="max_host_bytes"):
        send(host, script, params=params, limits=limits, guest_tools=True, mcp=False)
    assert 0 < len(guest_calls) < n // 2, len(guest_calls)

    # An output counts as what the session keeps of it: two of 1.5 MB cut
    # to max_tool_output_bytes fit, as they would one by one.
    script = calls_then_answer(*[("big", {"i": i, "n": 1_500_000}) for i in range(2)])
    body, _events, requests = send(host, script, limits=limits, mcp=False)
    assert body["choices"][0]["message"]["content"] == "done", body
    assert len(tool_messages(requests)) == 2



def _strays_at_most(expected: int) -> int:
    """The process's abandoned calls still running, once they are `expected`
    or fewer (a bounded wait: released calls end on their workers, which
    tell no one)."""
    from spearpy.driver import parallel

    pause = threading.Event()
    for _ in range(int(BOUND_S / 0.01)):
        if parallel._STRAYS.count <= expected:
            break
        pause.wait(0.01)
    return parallel._STRAYS.count


def test_calls_abandoned_and_still_running_are_bounded_across_runs(
        host: Host, gate: Gate, monkeypatch: pytest.MonkeyPatch) -> None:
    """A Python tool that never returns keeps the worker of every call a
    cancel abandoned: past MAX_STRAYS of them a batch answers its calls
    tool_exec_failed rather than start one more thread each; once they
    return, calls run again."""
    from spearpy.driver import parallel

    base = _strays_at_most(0)
    monkeypatch.setattr(parallel, "MAX_STRAYS", base + 2)
    cancel = threading.Event()

    def cancel_when_running() -> None:
        with gate.lock:
            gate.changed.wait_for(lambda: gate.started >= 2, BOUND_S)
        cancel.set()

    threading.Thread(target=cancel_when_running, daemon=True).start()
    with pytest.raises(wasmtime.WasmtimeError, match="cancelled"):
        send(host, calls_then_answer(("block", {"i": 0}), ("block", {"i": 1})),
             cancel=cancel, mcp=False)
    assert parallel._STRAYS.count == base + 2  # both still blocked on their workers

    counts = calls_then_answer(("count", {"i": 0}), ("count", {"i": 1}))
    body, events, requests = send(host, counts, mcp=False)
    assert body["choices"][0]["message"]["content"] == "done", body
    for _cid, content in tool_messages(requests):
        error = json.loads(content)["error"]
        assert error["code"] == abi.TOOL_EXEC_FAILED and "not started" in error["message"]
    assert gate.started == 2  # neither count call ran
    assert sorted(e["tool_call_id"] for e in tool_events(events, ev.TOOL_END)) == ["c0", "c1"]

    gate.release.set()
    assert _strays_at_most(base) == base
    body, _events, requests = send(host, counts, mcp=False)
    assert tool_messages(requests) == [("c0", "count 0"), ("c1", "count 1")]


def test_a_journal_refusing_a_batchs_record_still_ends_every_running_call(
        host: Host, gate: Gate, tmp_path: Path) -> None:
    """The journal refuses `big`'s outcome (past its byte cap) while `block`
    still runs: the run ends memory_limit and `block` gets its TOOL_END,
    as every tool_start has one."""
    from spearpy.durable import JournalSpec

    server: ScriptedServer = host.upstream  # type: ignore[attr-defined]
    server.script = Script.load(calls_then_answer(("big", {"i": 0, "n": 100_000}),
                                                  ("block", {"i": 1})))
    server.clear_requests()
    events: list[Event] = []
    result = host.run(wat_module("durable.wat"), on_event=events.append,
                      journal=JournalSpec(tmp_path / "capped.jsonl", max_bytes=32 * 1024))
    assert result.outcome == "memory_limit", result.message
    started = sorted(e["tool_call_id"] for e in tool_events(events, ev.TOOL_START))
    ended = sorted(e["tool_call_id"] for e in tool_events(events, ev.TOOL_END))
    assert started == ["c0", "c1"]
    assert ended == started
