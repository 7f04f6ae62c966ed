"""Event ordering and pairing invariants, on real runs of a WAT agent against a
real loopback model, including trapping tools, upstream 500s and limits.

`agent_wasm` (also used by the other observe tests) builds a small agent
guest: it opens a session, writes messages, registers tools, optionally sets
params, sends with AUTO_TOOL_CALL, prints each response body on stdout and
closes the session (unless told to leave it open for the run's end).
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import wasmtime

from spearpy.observe import events as ev
from spearpy.observe.events import Event, EventBus, FanOut

# The agent's tools, by table index.
TOOLS = {
    "echo": 0,  # output = arguments
    "stamp": 1,  # output = {"ok":true}
    "boom": 2,  # traps
    "fails": 3,  # returns rc 5
}


_STAMP = "".join(f"\\{b:02x}" for b in b'{"ok":true}')


def tool(name: str) -> dict[str, Any]:
    return {"type": "function", "function": {
        "name": name, "description": f"the {name} tool",
        "parameters": {"type": "object", "properties": {}}}}


def _wat_bytes(raw: bytes) -> str:
    return "".join(f"\\{b:02x}" for b in raw)


class _Data:
    def __init__(self, base: int = 1024) -> None:
        self.base = base
        self.offset = base
        self.chunks: list[str] = []

    def add(self, text: str) -> tuple[int, int]:
        raw = text.encode()
        ptr = self.offset
        self.chunks.append(f'(data (i32.const {ptr}) "{_wat_bytes(raw)}")')
        self.offset += len(raw) + 8 - (len(raw) % 8)
        return ptr, len(raw)


def agent_wasm(messages: list[tuple[str, str]], tools: list[str],
               params: dict[str, Any] | None = None, *, sends: list[list[tuple[str, str]]]
               | None = None, close: bool = True, flags: int = 3) -> bytes:
    """An agent guest. `sends`: extra user turns, each followed by another send."""
    data = _Data()
    body: list[str] = ["(local.set $fd (call $create))"]

    def write_msgs(msgs: list[tuple[str, str]]) -> None:
        for role, content in msgs:
            rp, rl = data.add(role)
            cp, cl = data.add(content)
            body.append(f"(drop (call $msg (local.get $fd) (i32.const {rp}) (i32.const {rl}) "
                        f"(i32.const {cp}) (i32.const {cl})))")

    def send() -> None:
        body.append(f"(call $send_print (local.get $fd) (i32.const {flags}))")

    write_msgs(messages)
    for name in tools:
        sp, sl = data.add(json.dumps(tool(name)))
        body.append(f"(drop (call $fn (local.get $fd) (i32.const {TOOLS[name]}) "
                    f"(i32.const {sp}) (i32.const {sl})))")
    for key, value in (params or {}).items():
        pp, pl = data.add(json.dumps({"key": key, "value": value}))
        body.append(f"(i32.store (i32.const 256) (i32.const {pl}))")
        body.append(f"(drop (call $ctl (local.get $fd) (i32.const 1) (i32.const {pp}) "
                    "(i32.const 256)))")
    send()
    for turn in sends or []:
        write_msgs(turn)
        send()
    if close:
        body.append("(drop (call $close (local.get $fd)))")
    nl, _ = data.add("\n")
    wat = f"""
(module
  (import "spear" "cchat_create" (func $create (result i32)))
  (import "spear" "cchat_write_msg" (func $msg (param i32 i32 i32 i32 i32) (result i32)))
  (import "spear" "cchat_write_fn" (func $fn (param i32 i32 i32 i32) (result i32)))
  (import "spear" "cchat_ctl" (func $ctl (param i32 i32 i32 i32) (result i32)))
  (import "spear" "cchat_send" (func $send (param i32 i32) (result i32)))
  (import "spear" "cchat_recv" (func $recv (param i32 i32 i32) (result i32)))
  (import "spear" "cchat_close" (func $close (param i32) (result i32)))
  (import "wasi_snapshot_preview1" "fd_write"
    (func $fd_write (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 4)
  (global $heap (mut i32) (i32.const 131072))
  {" ".join(data.chunks)}
  (func $print (param $ptr i32) (param $len i32)
    (i32.store (i32.const 600) (local.get $ptr))
    (i32.store (i32.const 604) (local.get $len))
    (drop (call $fd_write (i32.const 1) (i32.const 600) (i32.const 1) (i32.const 700))))
  (func $send_print (param $fd i32) (param $flags i32) (local $r i32) (local $n i32)
    (local.set $r (call $send (local.get $fd) (local.get $flags)))
    (i32.store (i32.const 512) (i32.const 60000))
    (local.set $n (call $recv (local.get $r) (i32.const 65536) (i32.const 512)))
    (if (i32.gt_s (local.get $n) (i32.const 0))
      (then (call $print (i32.const 65536) (local.get $n))
            (call $print (i32.const {nl}) (i32.const 1)))))
  (func $echo (param $a i32) (param $n i32) (param $o i32) (param $lp i32) (result i32)
    (if (i32.gt_u (local.get $n) (i32.load (local.get $lp)))
      (then (i32.store (local.get $lp) (local.get $n)) (return (i32.const -28))))
    (memory.copy (local.get $o) (local.get $a) (local.get $n))
    (i32.store (local.get $lp) (local.get $n))
    (i32.const 0))
  (data (i32.const 900) "{_STAMP}")
  (func $stamp (param i32 i32) (param $o i32) (param $lp i32) (result i32)
    (if (i32.gt_u (i32.const 11) (i32.load (local.get $lp)))
      (then (i32.store (local.get $lp) (i32.const 11)) (return (i32.const -28))))
    (memory.copy (local.get $o) (i32.const 900) (i32.const 11))
    (i32.store (local.get $lp) (i32.const 11))
    (i32.const 0))
  (func $boom (param i32 i32 i32 i32) (result i32) unreachable)
  (func $fails (param i32 i32 i32 i32) (result i32) (i32.const 5))
  (table (export "__indirect_function_table") 4 funcref)
  (elem (i32.const 0) $echo $stamp $boom $fails)
  (func (export "spear_alloc") (param $size i32) (result i32)
    (local $p i32)
    (local.set $p (global.get $heap))
    (global.set $heap (i32.and (i32.add (i32.add (global.get $heap) (local.get $size))
                                        (i32.const 7)) (i32.const -8)))
    (local.get $p))
  (func (export "spear_free") (param i32 i32))
  (func (export "_start") (local $fd i32)
    {" ".join(body)}))
"""
    return bytes(wasmtime.wat2wasm(wat))


# ---- the invariants ----------------------------------------------------------

SEND_SCOPED = {ev.COMPLETION_START, ev.COMPLETION_END, ev.TOOL_START, ev.TOOL_END, ev.LIMIT_HIT}


def check_invariants(events: list[Event]) -> dict[str, int]:
    """Assert the ordering/pairing rules; return event counts by kind."""
    assert events, "no events"
    assert [e.seq for e in events] == list(range(len(events)))
    assert events[0].kind == ev.RUN_START and events[-1].kind == ev.RUN_END
    assert len({e.run_id for e in events}) == 1
    open_send: int | None = None
    open_tool: str | None = None
    open_completion: int | None = None
    starts: Counter[str] = Counter()
    ends: Counter[str] = Counter()
    for e in events:
        if e.kind == ev.SEND_START:
            assert open_send is None, f"nested send at seq {e.seq}"
            open_send = e.fd
        elif e.kind == ev.SEND_END:
            assert open_send == e.fd, f"send_end without its send_start at seq {e.seq}"
            assert open_tool is None and open_completion is None
            open_send = None
        elif e.kind in SEND_SCOPED:
            assert open_send is not None and e.fd == open_send, \
                f"{e.kind} outside its send at seq {e.seq}"
        if e.kind == ev.TOOL_START:
            assert open_tool is None, "tool_start while another tool runs"
            open_tool = e.data["tool_call_id"]
            starts[e.data["tool_call_id"]] += 1
        elif e.kind == ev.TOOL_END:
            assert open_tool == e.data["tool_call_id"], "tool_end does not match tool_start"
            open_tool = None
            ends[e.data["tool_call_id"]] += 1
        elif e.kind == ev.COMPLETION_START:
            assert open_completion is None
            open_completion = e.data["iteration"]
        elif e.kind == ev.COMPLETION_END:
            assert open_completion == e.data["iteration"]
            open_completion = None
        elif e.kind in (ev.SESSION_CLOSE, ev.RUN_END):
            assert open_send is None
    assert open_send is None
    assert starts == ends and set(starts.values()) <= {1}, (starts, ends)
    return dict(Counter(e.kind for e in events))


def _run(make_host: Any, scripted: Any, script: Any, wasm: bytes,
         **config: Any) -> tuple[Any, list[Event], Any]:
    server = scripted(script)
    host = make_host(base_url=server.base_url, **config)
    events: list[Event] = []
    result = host.run(wasm, on_event=events.append)
    return result, events, server


MULTI_TOOL_SCRIPT = {"rules": [
    {"when": {"tool_messages": 0},
     "reply": {"tool_calls": [{"name": "echo", "arguments": {"text": "hello"}}]}},
    {"when": {"tool_messages": 1},
     "reply": {"tool_calls": [{"name": "echo", "arguments": {"n": 2}},
                              {"name": "stamp", "arguments": {}}]}},
    {"when": {"tool_messages": 3}, "reply": {"content": "done: {{last_tool}}"}},
], "default": {"content": "again"}}


def test_multi_tool_send_is_ordered_and_paired(make_host: Any, scripted: Any) -> None:
    wasm = agent_wasm([("user", "go")], ["echo", "stamp"])
    result, events, _ = _run(make_host, scripted, MULTI_TOOL_SCRIPT, wasm)
    assert result.ok, result
    counts = check_invariants(events)
    assert counts[ev.TOOL_START] == counts[ev.TOOL_END] == 3
    assert counts[ev.COMPLETION_END] == 3 and counts[ev.SEND_END] == 1
    # Every executed call names the tool source that ran it.
    assert {e.data["source"] for e in events if e.kind in (ev.TOOL_START, ev.TOOL_END)} \
        == {"guest"}
    assert counts[ev.SESSION_CLOSE] == 1
    assert b'done: {\\"ok\\":true}' in (result.stdout or b"")
    tool_ends = [e for e in events if e.kind == ev.TOOL_END]
    assert [e.data["name"] for e in tool_ends] == ["echo", "echo", "stamp"]
    assert all(e.data["executed"] and e.data["error"] is None for e in tool_ends)
    assert [e.data["iteration"] for e in tool_ends] == [1, 2, 2]
    # Contents travel beside the data, never inside it.
    assert tool_ends[2].content == {"output": '{"ok":true}'}
    assert all("output" not in e.as_dict() and "arguments" not in e.as_dict() for e in events)
    send_end = next(e for e in events if e.kind == ev.SEND_END)
    assert (send_end.data["outcome"], send_end.data["iterations"],
            send_end.data["tool_calls"]) == ("ok", 3, 3)


def test_trapping_and_failing_tools_still_pair(make_host: Any, scripted: Any) -> None:
    script = {"rules": [
        {"when": {"tool_messages": 0},
         "reply": {"tool_calls": [{"name": "boom"}, {"name": "fails"}, {"name": "ghost"},
                                  {"name": "echo", "arguments": "{not json"}]}},
    ], "default": {"content": "recovered"}}
    wasm = agent_wasm([("user", "go")], ["echo", "boom", "fails"])
    result, events, _ = _run(make_host, scripted, script, wasm)
    assert result.ok, result
    counts = check_invariants(events)
    assert counts[ev.TOOL_START] == 4
    errors = [e.data["error"] for e in events if e.kind == ev.TOOL_END]
    assert errors == ["tool_exec_failed", "tool_exec_failed", "unknown_tool",
                      "invalid_arguments"]
    rcs = [e.data["rc"] for e in events if e.kind == ev.TOOL_END]
    assert rcs[1] == 5


def test_upstream_500_ends_the_send_with_paired_events(make_host: Any, scripted: Any) -> None:
    script = {"rules": [
        {"when": {"tool_messages": 0}, "reply": {"tool_calls": [{"name": "echo"}]}},
        {"when": {"tool_messages": 1}, "reply": {"status": 500, "error": "upstream broke"}},
    ]}
    wasm = agent_wasm([("user", "go")], ["echo"])
    result, events, _ = _run(make_host, scripted, script, wasm)
    assert result.ok
    check_invariants(events)
    failed = [e for e in events if e.kind == ev.COMPLETION_END and e.data["error"]]
    assert [(e.data["status"], e.data["iteration"]) for e in failed] == [(500, 2)]
    send_end = next(e for e in events if e.kind == ev.SEND_END)
    assert send_end.data["outcome"] == "error"
    assert send_end.data["error"] == "upstream_http_error"


def test_iteration_limit_answers_every_call_and_pairs(make_host: Any, scripted: Any) -> None:
    script = {"rules": [], "default": {"tool_calls": [{"name": "echo"}, {"name": "stamp"}]}}
    wasm = agent_wasm([("user", "go")], ["echo", "stamp"], {"max_iterations": 2})
    result, events, _ = _run(make_host, scripted, script, wasm)
    assert result.ok
    counts = check_invariants(events)
    limit = next(e for e in events if e.kind == ev.LIMIT_HIT)
    assert (limit.data["limit"], limit.data["value"], limit.data["iteration"]) == \
        ("max_iterations", 2, 2)
    skipped = [e for e in events if e.kind == ev.TOOL_END and not e.data["executed"]]
    assert [e.data["error"] for e in skipped] == ["not_run", "not_run"]
    assert counts[ev.TOOL_START] == 4  # two run in iteration 1, two answered unrun
    send_end = next(e for e in events if e.kind == ev.SEND_END)
    assert send_end.data["error"] == "tool_call_limit"


def test_tool_call_limit_pairs(make_host: Any, scripted: Any) -> None:
    script = {"rules": [], "default": {"tool_calls": [{"name": "echo"}] * 3}}
    wasm = agent_wasm([("user", "go")], ["echo"], {"max_tool_calls": 2})
    result, events, _ = _run(make_host, scripted, script, wasm)
    assert result.ok
    check_invariants(events)
    assert [e.data["limit"] for e in events if e.kind == ev.LIMIT_HIT] == ["max_total_tool_calls"]


def test_two_sends_and_a_session_left_open(make_host: Any, scripted: Any) -> None:
    wasm = agent_wasm([("user", "go")], ["echo", "stamp"],
                      sends=[[("user", "and again")]], close=False)
    result, events, _ = _run(make_host, scripted, MULTI_TOOL_SCRIPT, wasm)
    assert result.ok
    counts = check_invariants(events)
    assert counts[ev.SEND_START] == counts[ev.SEND_END] == 2
    # The session still open at the end is closed (and reported) before run_end.
    assert [e.kind for e in events[-2:]] == [ev.SESSION_CLOSE, ev.RUN_END]


def test_run_deadline_mid_send_keeps_the_pairs(make_host: Any, scripted: Any) -> None:
    script = {"rules": [], "default": {"tool_calls": [{"name": "echo"}], "delay_ms": 400}}
    wasm = agent_wasm([("user", "go")], ["echo"])
    result, events, _ = _run(make_host, scripted, script, wasm, timeout=0.3)
    assert result.outcome == "timeout"
    check_invariants(events)
    assert events[-1].data["outcome"] == "timeout"


def test_a_failing_sink_is_isolated() -> None:
    seen: list[str] = []

    def broken(_event: Event) -> None:
        raise RuntimeError("sink bug")

    bus = EventBus("r1", [broken, FanOut(broken, lambda e: seen.append(e.kind))])
    bus.emit(ev.RUN_START)
    bus.emit(ev.RUN_END, outcome="exited")
    assert seen == [ev.RUN_START, ev.RUN_END]
