"""Auto tool calling end to end: real wasm tools called by the host's loop."""

from __future__ import annotations

import json
from typing import Any

from spearpy import abi
from spearpy.fds import ChatSessionFd
from tests.probe import Probe, tool_schema

ECHO, WRONG, BOOM, LIAR, FAILS, BIG, BINARY, SPIN, REENTER = range(9)


def call(name: str, arguments: Any, call_id: str | None = None) -> dict[str, Any]:
    entry: dict[str, Any] = {"name": name, "arguments": arguments}
    if call_id:
        entry["id"] = call_id
    return entry


def two_step(*calls: dict[str, Any]) -> dict[str, Any]:
    return {"rules": [{"when": {"no_tool_message": True}, "reply": {"tool_calls": list(calls)}}],
            "default": {"content": "final: {{last_tool}}"}}


def session(p: Probe, tools: dict[str, int], *, arena: bool = False) -> int:
    fd = int(p.hc("cchat_create"))
    for name, index in tools.items():
        props = {"x": {"type": "integer"}} if name == "echo" else None
        assert p.write_fn(fd, index, tool_schema(name, props)) == 0
    if arena:
        assert p.set_param(fd, "tool_arena_ptr", 200_000) == 0
        assert p.set_param(fd, "tool_arena_len", 32_768) == 0
    assert p.write_msg(fd, "user", "go") == 0
    return fd


def tool_messages(server: Any, index: int = -1) -> list[dict[str, Any]]:
    return [m for m in server.requests[index].body["messages"] if m["role"] == "tool"]


def test_auto_send_runs_the_tool_and_feeds_the_result_back(probe: Any, make_host: Any,
                                                           scripted: Any) -> None:
    server = scripted(two_step(call("echo", {"x": 7}, "call_a")))
    p = probe(make_host(base_url=server.base_url))
    fd = session(p, {"echo": ECHO})
    body = p.recv_json(p.hc("cchat_send", fd, abi.SEND_AUTO_TOOL_CALL))
    assert body["choices"][0]["message"]["content"] == 'final: {"x":7}'
    assert body["_spear"]["iterations"] == 2 and body["_spear"]["tool_calls"] == 1
    second = server.requests[1].body
    assert second["tools"][0]["function"]["name"] == "echo"
    assistant = second["messages"][1]
    assert assistant["role"] == "assistant"
    assert assistant["tool_calls"][0]["id"] == "call_a"
    assert assistant["tool_calls"][0]["function"]["arguments"] == '{"x":7}'
    assert second["messages"][2] == {"role": "tool", "tool_call_id": "call_a",
                                     "content": '{"x":7}'}
    assert body["_spear"]["usage"]["prompt_tokens"] > 0


def test_usage_is_summed_over_every_completion(probe: Any, make_host: Any,
                                               scripted: Any) -> None:
    script = {"rules": [
        {"when": {"no_tool_message": True},
         "reply": {"tool_calls": [call("echo", {"x": 1})],
                   "usage": {"prompt_tokens": 10, "completion_tokens": 3, "total_tokens": 13}}}],
        "default": {"content": "ok",
                    "usage": {"prompt_tokens": 20, "completion_tokens": 5, "total_tokens": 25}}}
    server = scripted(script)
    p = probe(make_host(base_url=server.base_url))
    fd = session(p, {"echo": ECHO})
    body = p.recv_json(p.hc("cchat_send", fd, abi.SEND_AUTO_TOOL_CALL | abi.SEND_ENABLE_METRICS))
    assert body["_spear"]["usage"] == {"prompt_tokens": 30, "completion_tokens": 8,
                                       "total_tokens": 38}
    p.u32(p.A, 4096)
    rfd = p.run.fds.entries()[-1][0]
    n = p.hc("cchat_ctl", rfd, abi.CTL_GET_METRICS, p.B, p.A)
    metrics = json.loads(p.get(p.B, n))
    assert metrics["total_tokens"] == 38 and metrics["iterations"] == 2
    assert metrics["tool_calls"] == 1


def test_arena_and_allocator_placements_give_the_same_answer(probe: Any, make_host: Any,
                                                             scripted: Any) -> None:
    results = []
    for arena in (True, False):
        server = scripted(two_step(call("echo", {"x": 99})))
        p = probe(make_host(base_url=server.base_url))
        fd = session(p, {"echo": ECHO}, arena=arena)
        p.recv_json(p.hc("cchat_send", fd, abi.SEND_AUTO_TOOL_CALL))
        results.append(tool_messages(server)[0]["content"])
    assert results == ['{"x":99}', '{"x":99}']


def test_failures_become_tool_error_messages_and_the_loop_continues(
        probe: Any, make_host: Any, scripted: Any) -> None:
    server = scripted(two_step(
        call("boom", {}), call("liar", {}), call("fails", {}), call("binary", {}),
        call("nope", {}), call("echo", "{not json"), call("echo", {"x": "str"}),
        call("echo", {"x": 5})))
    p = probe(make_host(base_url=server.base_url))
    fd = session(p, {"echo": ECHO, "boom": BOOM, "liar": LIAR, "fails": FAILS,
                     "binary": BINARY})
    body = p.recv_json(p.hc("cchat_send", fd, abi.SEND_AUTO_TOOL_CALL))
    assert body["choices"][0]["message"]["content"] == 'final: {"x":5}'
    answers = tool_messages(server)
    codes = [json.loads(m["content"]).get("error", {}).get("code") for m in answers[:-1]]
    assert codes == ["tool_exec_failed", "tool_exec_failed", "tool_exec_failed",
                     "tool_exec_failed", "unknown_tool", "invalid_arguments",
                     "invalid_arguments"]
    messages = [json.loads(m["content"])["error"]["message"] for m in answers[:-1]]
    assert "trap" in messages[0]
    assert "claimed" in messages[1]
    assert "returned 5" in messages[2]
    assert "UTF-8" in messages[3]
    assert answers[-1]["content"] == '{"x":5}'
    # The instance survived the trap: the same session can send again.
    assert p.write_msg(fd, "user", "again") == 0


def test_output_growth_through_the_allocator(probe: Any, make_host: Any, scripted: Any) -> None:
    script = two_step(call("big", {}))
    script["default"] = {"content": "got it"}
    server = scripted(script)
    p = probe(make_host(base_url=server.base_url))
    p.call("set_big", 200 * 1024)
    fd = session(p, {"big": BIG})
    assert p.set_param(fd, "max_tool_output_bytes", 300 * 1024) == 0
    body = p.recv_json(p.hc("cchat_send", fd, abi.SEND_AUTO_TOOL_CALL))
    assert "error" not in body
    assert tool_messages(server)[0]["content"] == "x" * (200 * 1024)


def test_output_too_large(probe: Any, make_host: Any, scripted: Any) -> None:
    server = scripted(two_step(call("big", {})))
    p = probe(make_host(base_url=server.base_url))
    p.call("set_big", 100 * 1024)
    fd = session(p, {"big": BIG})  # default max_tool_output_bytes = 64 KiB
    p.recv_json(p.hc("cchat_send", fd, abi.SEND_AUTO_TOOL_CALL))
    error = json.loads(tool_messages(server)[0]["content"])["error"]
    assert error["code"] == "output_too_large"


def test_arena_only_guest_cannot_grow_past_its_arena(probe: Any, make_host: Any,
                                                     scripted: Any) -> None:
    server = scripted(two_step(call("big", {})))
    p = probe(make_host(base_url=server.base_url),
              replace={'(func (export "spear_alloc")': '(func $no_alloc'})
    p.call("set_big", 40 * 1024)
    fd = session(p, {"big": BIG}, arena=True)
    p.recv_json(p.hc("cchat_send", fd, abi.SEND_AUTO_TOOL_CALL))
    error = json.loads(tool_messages(server)[0]["content"])["error"]
    assert error["code"] == "tool_exec_failed" and "arena" in error["message"]


def test_no_arena_no_allocator_fails_the_call_with_a_reason(probe: Any, make_host: Any,
                                                            scripted: Any) -> None:
    server = scripted(two_step(call("echo", {"x": 1})))
    p = probe(make_host(base_url=server.base_url),
              replace={'(func (export "spear_alloc")': '(func $no_alloc'})
    fd = session(p, {"echo": ECHO})
    p.recv_json(p.hc("cchat_send", fd, abi.SEND_AUTO_TOOL_CALL))
    error = json.loads(tool_messages(server)[0]["content"])["error"]
    assert "spear_alloc" in error["message"]


def test_plain_send_returns_tool_calls_then_auto_send_runs_them(probe: Any, make_host: Any,
                                                                scripted: Any) -> None:
    server = scripted(two_step(call("echo", {"x": 3}, "c1")))
    p = probe(make_host(base_url=server.base_url))
    fd = session(p, {"echo": ECHO})
    plain = p.recv_json(p.hc("cchat_send", fd, 0))
    assert plain["choices"][0]["message"]["tool_calls"][0]["id"] == "c1"
    assert len(server.requests) == 1
    refused = p.recv_json(p.hc("cchat_send", fd, 0))
    assert refused["error"]["code"] == "pending_tool_calls"
    assert len(server.requests) == 1  # refused without going upstream
    auto = p.recv_json(p.hc("cchat_send", fd, abi.SEND_AUTO_TOOL_CALL))
    assert auto["choices"][0]["message"]["content"] == 'final: {"x":3}'
    assert tool_messages(server)[0] == {"role": "tool", "tool_call_id": "c1",
                                        "content": '{"x":3}'}


def test_guest_answers_a_pending_call_itself(probe: Any, make_host: Any, scripted: Any) -> None:
    server = scripted(two_step(call("echo", {"x": 3}, "c1")))
    p = probe(make_host(base_url=server.base_url))
    fd = session(p, {"echo": ECHO})
    p.recv_json(p.hc("cchat_send", fd, 0))
    answer = json.dumps({"tool_call_id": "c1", "content": "approved by the guest"})
    assert p.write_msg(fd, "tool", json.dumps({"tool_call_id": "zz", "content": "x"})) \
        == abi.EINVAL
    assert p.write_msg(fd, "tool", answer) == 0
    assert p.write_msg(fd, "tool", answer) == abi.EINVAL  # already answered
    body = p.recv_json(p.hc("cchat_send", fd, 0))
    assert body["choices"][0]["message"]["content"] == "final: approved by the guest"


def test_iteration_limit_answers_every_call(probe: Any, make_host: Any, scripted: Any) -> None:
    endless = {"rules": [{"reply": {"tool_calls": [call("echo", {"x": 1}),
                                                    call("echo", {"x": 2})]}}]}
    server = scripted(endless)
    p = probe(make_host(base_url=server.base_url))
    fd = session(p, {"echo": ECHO})
    assert p.set_param(fd, "max_iterations", 3) == 0
    body = p.recv_json(p.hc("cchat_send", fd, abi.SEND_AUTO_TOOL_CALL))
    assert body["error"]["code"] == "tool_call_limit"
    assert len(server.requests) == 3
    session_obj = p.run.fds.get(fd, ChatSessionFd).session
    assert session_obj.pending_calls() == []
    ids = [c["id"] for m in session_obj.messages if m["role"] == "assistant"
           for c in m.get("tool_calls", [])]
    answered = [m["tool_call_id"] for m in session_obj.messages if m["role"] == "tool"]
    assert sorted(ids) == sorted(answered) and len(set(ids)) == len(ids)


def test_host_cap_bounds_the_guest(probe: Any, make_host: Any, scripted: Any) -> None:
    endless = {"rules": [{"reply": {"tool_calls": [call("echo", {"x": 1})]}}]}
    server = scripted(endless)
    p = probe(make_host(base_url=server.base_url, max_iterations=2, max_iterations_cap=4))
    fd = session(p, {"echo": ECHO})
    assert p.set_param(fd, "max_iterations", 100) == 0  # clamped to the host cap
    body = p.recv_json(p.hc("cchat_send", fd, abi.SEND_AUTO_TOOL_CALL))
    assert body["error"]["code"] == "tool_call_limit"
    assert len(server.requests) == 4


def test_strict_tools_end_the_send(probe: Any, make_host: Any, scripted: Any) -> None:
    server = scripted(two_step(call("nope", {})))
    p = probe(make_host(base_url=server.base_url))
    fd = session(p, {"echo": ECHO})
    assert p.set_param(fd, "strict_tools", True) == 0
    body = p.recv_json(p.hc("cchat_send", fd, abi.SEND_AUTO_TOOL_CALL))
    assert body["error"]["code"] == "unknown_tool"
    assert len(server.requests) == 1


def test_tool_deadline_fails_only_that_call(probe: Any, make_host: Any, scripted: Any) -> None:
    server = scripted(two_step(call("spin", {}), call("echo", {"x": 4})))
    p = probe(make_host(base_url=server.base_url, tool_timeout=0.2))
    fd = session(p, {"spin": SPIN, "echo": ECHO})
    body = p.recv_json(p.hc("cchat_send", fd, abi.SEND_AUTO_TOOL_CALL))
    answers = tool_messages(server)
    error = json.loads(answers[0]["content"])["error"]
    assert error["code"] == "tool_exec_failed" and "deadline" in error["message"]
    assert answers[1]["content"] == '{"x":4}'
    assert body["choices"][0]["message"]["content"] == 'final: {"x":4}'


def test_cache_tool_results_reuses_identical_calls(probe: Any, make_host: Any,
                                                   scripted: Any) -> None:
    server = scripted(two_step(call("echo", {"x": 1}), call("echo", {"x": 1})))
    p = probe(make_host(base_url=server.base_url))
    fd = session(p, {"echo": ECHO})
    assert p.set_param(fd, "cache_tool_results", True) == 0
    body = p.recv_json(p.hc("cchat_send", fd, abi.SEND_AUTO_TOOL_CALL))
    assert body["_spear"]["tool_calls"] == 1
    assert [m["content"] for m in tool_messages(server)] == ['{"x":1}', '{"x":1}']


def test_a_tool_cannot_send_on_the_session_running_it(probe: Any, make_host: Any,
                                                      scripted: Any) -> None:
    server = scripted(two_step(call("reenter", {})))
    p = probe(make_host(base_url=server.base_url))
    fd = session(p, {"reenter": REENTER})
    p.call("set_reenter_fd", fd)
    body = p.recv_json(p.hc("cchat_send", fd, abi.SEND_AUTO_TOOL_CALL))
    assert p.call("last_rc") == abi.EAGAIN
    assert body["choices"][0]["message"]["content"] == "final: ok"


def test_a_tool_may_run_a_sub_agent_on_another_session(probe: Any, make_host: Any,
                                                       scripted: Any) -> None:
    server = scripted(two_step(call("reenter", {})))
    p = probe(make_host(base_url=server.base_url))
    fd = session(p, {"reenter": REENTER})
    other = p.hc("cchat_create")
    assert p.write_msg(other, "user", "sub-question") == 0
    p.call("set_reenter_fd", other)
    p.recv_json(p.hc("cchat_send", fd, abi.SEND_AUTO_TOOL_CALL))
    assert p.call("last_rc") >= 1000  # a response fd from the nested send
    assert any(r.body["messages"] == [{"role": "user", "content": "sub-question"}]
               for r in server.requests)
