"""ToolLoop example tests: one per policy (spear-abi.md sections 3-4)."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Iterable
from typing import Any

import pytest

from spearpy import abi
from spearpy.chat.loop import LoopProtocolError, LoopState, ToolLoop
from spearpy.chat.protocol import (
    Action,
    CallTool,
    Complete,
    CompletionResult,
    Done,
    Failed,
    LimitHit,
    LoopLimits,
    ToolOutcome,
    ToolSkipped,
    UpstreamError,
)
from spearpy.chat.registry import parse_tool_schema
from spearpy.chat.session import ChatSession

ADD = {
    "name": "add",
    "parameters": {
        "type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
        "required": ["a", "b"],
    },
}


def make_session(*schemas: dict[str, Any]) -> ChatSession:
    session = ChatSession(1000)
    for offset, raw in enumerate(schemas or (ADD, {"name": "echo"})):
        name, spec = parse_tool_schema(json.dumps(raw).encode())
        session.registry.add(name, offset + 1, spec)
    session.write_message("user", "go")
    return session


def tc(name: str, args: Any = "{}", call_id: str | None = None) -> dict[str, Any]:
    entry: dict[str, Any] = {"type": "function", "function": {"name": name, "arguments": args}}
    if call_id is not None:
        entry["id"] = call_id
    return entry


def reply(
    content: str | None = None,
    calls: Iterable[dict[str, Any]] = (),
    total: int = 0,
    **message_extra: Any,
) -> CompletionResult:
    message: dict[str, Any] = {"role": "assistant", "content": content, **message_extra}
    calls = list(calls)
    if calls:
        message["tool_calls"] = calls
    body = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "model": "up-model",
        "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
        "usage": {
            "prompt_tokens": total // 2,
            "completion_tokens": total - total // 2,
            "total_tokens": total,
        },
    }
    return CompletionResult(backend="fake", model="m", body=body)


def ok(output: str) -> ToolOutcome:
    return ToolOutcome(ok=True, output=output)


def loop_for(
    session: ChatSession, auto: bool = True, metrics_enabled: bool = False, **limits: Any
) -> ToolLoop:
    return ToolLoop(
        session,
        LoopLimits(**limits),
        auto=auto,
        backend="fake",
        model="m",
        metrics_enabled=metrics_enabled,
        clock=lambda: 0.0,  # a fixed clock: elapsed_ms is exactly 0
    )


def drive(
    loop: ToolLoop,
    replies: Iterable[CompletionResult],
    tool: Callable[[CallTool], ToolOutcome] = lambda a: ok(f"out:{a.arguments}"),
) -> tuple[Done | Failed, list[Action]]:
    pending = iter(replies)
    actions: list[Action] = []
    for _ in range(1000):
        action = loop.next_action()
        actions.append(action)
        if isinstance(action, Complete):
            loop.on_completion(next(pending))
        elif isinstance(action, CallTool):
            loop.on_tool_result(action.call.id, tool(action))
        else:
            return action, actions
    raise AssertionError("the loop did not terminate")


def error_of(content: str) -> str:
    return str(json.loads(content)["error"]["code"])


def tool_messages(session: ChatSession) -> list[dict[str, Any]]:
    return [m for m in session.messages if m["role"] == "tool"]


# ---- plain sends -------------------------------------------------------------


def test_plain_send_done_with_spear_metadata_and_reply_appended() -> None:
    session = make_session()
    result = reply("hello", total=10)
    original = copy.deepcopy(result.body)
    final, actions = drive(loop_for(session, auto=False), [result])
    assert isinstance(final, Done)
    assert isinstance(actions[0], Complete) and actions[0].iteration == 1
    assert actions[0].tools is session.registry.specs()
    assert final.body["choices"][0]["message"]["content"] == "hello"
    assert final.body["id"] == "chatcmpl-1"
    spear = final.body["_spear"]
    assert spear["backend"] == "fake" and spear["model"] == "m"
    assert spear["iterations"] == 1 and spear["tool_calls"] == 0
    assert spear["usage"] == {"prompt_tokens": 5, "completion_tokens": 5, "total_tokens": 10}
    assert session.messages[-1] == {"role": "assistant", "content": "hello"}
    assert result.body == original  # the upstream body is not mutated
    assert session.last_metrics == {}


def test_plain_send_leaves_calls_pending_with_session_ids_in_the_body() -> None:
    session = make_session()
    loop = loop_for(session, auto=False)
    final, actions = drive(loop, [reply(None, [tc("add", {"a": 1, "b": 2})])])
    assert isinstance(final, Done) and loop.state is LoopState.COMPLETED
    assert not any(isinstance(a, CallTool) for a in actions)
    pending = session.pending_calls()
    assert len(pending) == 1
    body_calls = final.body["choices"][0]["message"]["tool_calls"]
    assert body_calls[0]["id"] == pending[0].id  # generated, and visible to the guest
    assert body_calls[0]["function"]["arguments"] == '{"a":1,"b":2}'


def test_plain_send_with_pending_calls_fails_without_going_upstream() -> None:
    session = make_session()
    drive(loop_for(session, auto=False), [reply(None, [tc("add", "{}", "c1")])])
    loop = loop_for(session, auto=False)
    final = loop.next_action()
    assert isinstance(final, Failed)
    assert final.body["error"]["code"] == abi.SEND_PENDING_TOOL_CALLS
    assert final.body["_spear"]["iterations"] == 0
    assert loop.state is LoopState.FAILED
    assert [c.id for c in session.pending_calls()] == ["c1"]  # untouched for the guest

    assert session.write_message("tool", json.dumps({"tool_call_id": "c1", "content": "3"})) == 0
    final, _ = drive(loop_for(session, auto=False), [reply("three")])
    assert isinstance(final, Done)


def test_auto_send_runs_pending_calls_first() -> None:
    session = make_session()
    drive(loop_for(session, auto=False), [reply(None, [tc("echo", "{}", "c1")])])
    final, actions = drive(loop_for(session), [reply("done")])
    assert isinstance(actions[0], CallTool) and actions[0].call.id == "c1"
    assert isinstance(actions[1], Complete) and actions[1].iteration == 1
    assert isinstance(final, Done)
    assert session.messages[-2] == {"role": "tool", "tool_call_id": "c1", "content": "out:{}"}


# ---- the auto loop -------------------------------------------------------------


def test_auto_send_runs_calls_in_order_and_keeps_result_order() -> None:
    session = make_session()
    replies = [
        reply(None, [tc("add", '{"a":1,"b":2}', "x"), tc("echo", "{}", "y")], total=3),
        reply("3", total=4),
    ]
    final, actions = drive(loop_for(session, metrics_enabled=True), replies)
    assert isinstance(final, Done)
    kinds = [type(a).__name__ for a in actions]
    assert kinds == ["Complete", "CallTool", "CallTool", "Complete", "Done"]
    assert [a.tool.ref for a in actions if isinstance(a, CallTool)] == [1, 2]
    assert [m["tool_call_id"] for m in tool_messages(session)] == ["x", "y"]
    assert final.body["_spear"]["iterations"] == 2
    assert final.body["_spear"]["tool_calls"] == 2
    assert final.body["_spear"]["usage"]["total_tokens"] == 7
    assert session.last_metrics == {
        "prompt_tokens": 3,
        "completion_tokens": 4,
        "total_tokens": 7,
        "iterations": 2,
        "tool_calls": 2,
        "elapsed_ms": 0,
    }


def test_elapsed_ms_comes_from_the_injected_clock() -> None:
    ticks = iter([10.0, 12.5])
    session = make_session()
    loop = ToolLoop(
        session,
        LoopLimits(),
        auto=True,
        backend="b",
        model="m",
        metrics_enabled=True,
        clock=lambda: next(ticks),
    )
    final, _ = drive(loop, [reply("hi")])
    assert final.body["_spear"]["elapsed_ms"] == 2500
    assert session.last_metrics["elapsed_ms"] == 2500


def test_legacy_function_call_is_executed() -> None:
    session = make_session()
    legacy = reply(None, function_call={"name": "echo", "arguments": '{"k":1}'})
    final, actions = drive(loop_for(session), [legacy, reply("ok")])
    assert isinstance(final, Done)
    calls = [a for a in actions if isinstance(a, CallTool)]
    assert len(calls) == 1 and calls[0].arguments == '{"k":1}'
    assistant = session.messages[1]
    assert "function_call" not in assistant
    assert assistant["tool_calls"][0]["id"] == calls[0].call.id


def test_unknown_tool_goes_back_to_the_model() -> None:
    session = make_session()
    loop = loop_for(session)
    final, actions = drive(loop, [reply(None, [tc("nope", "{}", "u")]), reply("sorry")])
    assert isinstance(final, Done)
    assert not any(isinstance(a, CallTool) for a in actions)
    assert error_of(tool_messages(session)[0]["content"]) == abi.TOOL_UNKNOWN
    notes = loop.drain_notes()
    assert [(type(n).__name__, getattr(n, "code", None)) for n in notes] == [
        ("ToolSkipped", abi.TOOL_UNKNOWN)
    ]
    assert loop.drain_notes() == []


@pytest.mark.parametrize(
    "arguments",
    ['{"a": 1}', '{"a": "1", "b": 2}', "not json", "[1,2]", '{"a": NaN, "b": 1}'],
)
def test_invalid_arguments_go_back_to_the_model(arguments: str) -> None:
    session = make_session()
    final, actions = drive(loop_for(session), [reply(None, [tc("add", arguments)]), reply("ok")])
    assert isinstance(final, Done)
    assert not any(isinstance(a, CallTool) for a in actions)
    assert error_of(tool_messages(session)[0]["content"]) == abi.TOOL_INVALID_ARGUMENTS


def test_validation_can_be_disabled_but_json_is_still_required() -> None:
    session = make_session()
    replies = [reply(None, [tc("add", '{"a":"x"}'), tc("add", "{oops")]), reply("ok")]
    _, actions = drive(loop_for(session, validate_tool_args=False), replies)
    calls = [a for a in actions if isinstance(a, CallTool)]
    assert [c.arguments for c in calls] == ['{"a":"x"}']
    assert error_of(tool_messages(session)[1]["content"]) == abi.TOOL_INVALID_ARGUMENTS


@pytest.mark.parametrize(
    ("bad_call", "code"),
    [(tc("nope"), abi.TOOL_UNKNOWN), (tc("add", '{"a":1}'), abi.TOOL_INVALID_ARGUMENTS)],
)
def test_strict_tools_ends_the_send_but_answers_every_call(
    bad_call: dict[str, Any], code: str
) -> None:
    session = make_session()
    calls = [tc("echo", "{}", "1"), {**bad_call, "id": "2"}, tc("echo", "{}", "3")]
    loop = loop_for(session, strict_tools=True)
    final, actions = drive(loop, [reply(None, calls)])
    assert isinstance(final, Failed) and final.body["error"]["code"] == code
    assert loop.state is LoopState.FAILED
    assert [a.call.id for a in actions if isinstance(a, CallTool)] == ["1"]
    answers = {m["tool_call_id"]: m["content"] for m in tool_messages(session)}
    assert answers["1"] == "out:{}"
    assert error_of(answers["2"]) == code
    assert error_of(answers["3"]) == "not_run"
    assert session.pending_calls() == []


def test_tool_failures_and_oversized_output_become_tool_messages() -> None:
    session = make_session()
    outcomes = iter(
        [
            ToolOutcome(ok=False, error_code="tool_exec_failed", error_message="rc=-1", rc=-1),
            ok("x" * 11),
            ok("é" * 5),  # 10 bytes: exactly the limit
            ok("\udcff"),  # not encodable: the driver let non-UTF-8 through
        ]
    )
    calls = [tc("echo", "{}", str(i)) for i in range(4)]
    final, _ = drive(
        loop_for(session, max_tool_output_bytes=10),
        [reply(None, calls), reply("ok")],
        lambda _: next(outcomes),
    )
    assert isinstance(final, Done)
    contents = [m["content"] for m in tool_messages(session)]
    assert json.loads(contents[0]) == {"error": {"code": "tool_exec_failed", "message": "rc=-1"}}
    assert error_of(contents[1]) == abi.TOOL_OUTPUT_TOO_LARGE
    assert contents[2] == "é" * 5
    assert error_of(contents[3]) == abi.TOOL_EXEC_FAILED


def test_cache_reuses_identical_calls_within_one_send() -> None:
    session = make_session()
    first = [tc("add", '{"a":1,"b":2}', "p"), tc("add", '{"b": 2, "a": 1}', "q")]
    second = [tc("add", '{"a":1,"b":2}', "r"), tc("add", '{"a":2,"b":2}', "s")]
    loop = loop_for(session, cache_tool_results=True)
    final, actions = drive(loop, [reply(None, first), reply(None, second), reply("ok")])
    assert isinstance(final, Done)
    assert [a.call.id for a in actions if isinstance(a, CallTool)] == ["p", "s"]
    assert final.body["_spear"]["tool_calls"] == 2
    contents = {m["tool_call_id"]: m["content"] for m in tool_messages(session)}
    assert contents["q"] == contents["r"] == contents["p"]
    hits = [n.call.id for n in loop.drain_notes() if isinstance(n, ToolSkipped)]
    assert hits == ["q", "r"]


def test_cache_is_off_by_default_and_skips_failures() -> None:
    session = make_session()
    calls = [tc("echo", "{}", "a"), tc("echo", "{}", "b"), tc("echo", "{}", "c")]
    outcomes = iter([ToolOutcome(ok=False, error_code="tool_exec_failed"), ok("1"), ok("2")])
    _, actions = drive(
        loop_for(session, cache_tool_results=True),
        [reply(None, calls), reply("ok")],
        lambda _: next(outcomes),
    )
    assert [a.call.id for a in actions if isinstance(a, CallTool)] == ["a", "b"]
    session = make_session()
    _, actions = drive(loop_for(session), [reply(None, calls), reply("ok")])
    assert len([a for a in actions if isinstance(a, CallTool)]) == 3


# ---- limits ----------------------------------------------------------------------


def test_max_iterations_stops_before_running_unanswerable_calls() -> None:
    session = make_session()
    looping = [reply(None, [tc("echo", "{}", f"c{i}")]) for i in range(5)]
    loop = loop_for(session, max_iterations=2)
    final, actions = drive(loop, looping)
    assert isinstance(final, Failed) and final.body["error"]["code"] == abi.SEND_TOOL_CALL_LIMIT
    assert [type(a).__name__ for a in actions] == ["Complete", "CallTool", "Complete", "Failed"]
    assert error_of(tool_messages(session)[-1]["content"]) == "not_run"
    assert session.pending_calls() == []
    assert LimitHit("max_iterations", 2) in loop.drain_notes()
    assert final.body["_spear"]["iterations"] == 2


def test_max_iterations_zero_never_goes_upstream() -> None:
    loop = loop_for(make_session(), max_iterations=0)
    final = loop.next_action()
    assert isinstance(final, Failed) and final.body["error"]["code"] == abi.SEND_TOOL_CALL_LIMIT


def test_final_answer_on_the_last_iteration_is_done() -> None:
    # The limit is about tool calls left unanswered: a last completion that
    # answers is the send's answer, whole, with nothing noted as a limit.
    session = make_session()
    loop = loop_for(session, max_iterations=2)
    final, actions = drive(loop, [reply(None, [tc("echo")], total=4), reply("ok", total=6)])
    assert final == Done({
        "id": "chatcmpl-1", "object": "chat.completion", "model": "up-model",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"},
                     "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 3, "completion_tokens": 3, "total_tokens": 6},
        "_spear": {"backend": "fake", "model": "m", "iterations": 2, "tool_calls": 1,
                   "usage": {"prompt_tokens": 5, "completion_tokens": 5, "total_tokens": 10},
                   "elapsed_ms": 0}})
    assert [type(a).__name__ for a in actions] == ["Complete", "CallTool", "Complete", "Done"]
    assert loop.state is LoopState.COMPLETED and loop.drain_notes() == []
    assert [m["role"] for m in session.messages] == ["user", "assistant", "tool", "assistant"]
    assert session.messages[-1] == {"role": "assistant", "content": "ok"}
    assert session.pending_calls() == []


def test_max_total_tool_calls_runs_while_the_budget_lasts() -> None:
    session = make_session()
    calls = [
        tc("echo", "{}", "1"),
        tc("nope", "{}", "2"),
        tc("echo", "{}", "3"),
        tc("echo", "{}", "4"),
    ]
    loop = loop_for(session, max_total_tool_calls=1)
    final, actions = drive(loop, [reply(None, calls)])
    assert isinstance(final, Failed) and final.body["error"]["code"] == abi.SEND_TOOL_CALL_LIMIT
    assert [a.call.id for a in actions if isinstance(a, CallTool)] == ["1"]
    codes = [error_of(m["content"]) for m in tool_messages(session)[1:]]
    assert codes == [abi.TOOL_UNKNOWN, "not_run", "not_run"]
    assert LimitHit("max_total_tool_calls", 1) in loop.drain_notes()


def test_token_budget_ends_a_send_with_calls_but_not_a_final_answer() -> None:
    session = make_session()
    loop = loop_for(session, max_total_tokens=100)
    final, _ = drive(
        loop, [reply(None, [tc("echo")], total=60), reply(None, [tc("echo")], total=60)]
    )
    assert isinstance(final, Failed) and final.body["error"]["code"] == abi.SEND_TOKEN_BUDGET
    assert session.pending_calls() == []
    assert LimitHit("max_total_tokens", 100) in loop.drain_notes()

    session = make_session()
    final, _ = drive(
        loop_for(session, max_total_tokens=100),
        [reply(None, [tc("echo")], total=60), reply("fine", total=60)],
    )
    assert isinstance(final, Done)
    assert final.body["_spear"]["usage"]["total_tokens"] == 120


# ---- upstream failures --------------------------------------------------------------


def test_upstream_error_becomes_an_error_body_with_status() -> None:
    session = make_session()
    error = CompletionResult(
        backend="fake",
        model="m",
        error=UpstreamError(code="upstream_http_error", message="HTTP 500", status=500),
    )
    final, _ = drive(loop_for(session, metrics_enabled=True), [reply(None, [tc("echo")], 5), error])
    assert isinstance(final, Failed)
    assert final.body["error"] == {
        "code": "upstream_http_error",
        "message": "HTTP 500",
        "status": 500,
    }
    assert final.body["_spear"]["iterations"] == 2
    assert session.last_metrics["total_tokens"] == 5
    assert session.pending_calls() == []


@pytest.mark.parametrize(
    "body",
    [None, {}, {"choices": []}, {"choices": [{"text": "legacy"}]}, {"error": {"message": "quota"}}],
)
def test_unusable_body_is_upstream_bad_response(body: Any) -> None:
    session = make_session()
    before = list(session.messages)
    result = CompletionResult(backend="fake", model="m", body=body)
    final, _ = drive(loop_for(session), [result])
    assert isinstance(final, Failed)
    assert final.body["error"]["code"] == "upstream_bad_response"
    assert session.messages == before


def test_spear_reports_the_backend_and_model_that_answered() -> None:
    result = CompletionResult(backend="fallback", model="small", body=reply("x").body)
    final, _ = drive(loop_for(make_session()), [result])
    assert final.body["_spear"]["backend"] == "fallback"
    assert final.body["_spear"]["model"] == "small"


# ---- interrupts and driver mistakes ----------------------------------------------


def test_interrupt_answers_in_flight_and_queued_calls() -> None:
    session = make_session()
    loop = loop_for(session, metrics_enabled=True)
    assert isinstance(loop.next_action(), Complete)
    loop.on_completion(reply(None, [tc("echo", "{}", "a"), tc("echo", "{}", "b")]))
    action = loop.next_action()
    assert isinstance(action, CallTool) and action.call.id == "a"
    failed = loop.interrupt("deadline_exceeded", "run deadline passed")
    assert loop.state is LoopState.INTERRUPTED
    assert failed.body["error"]["code"] == "deadline_exceeded"
    assert loop.next_action() is failed
    assert session.pending_calls() == []
    assert [error_of(m["content"]) for m in tool_messages(session)] == ["deadline_exceeded"] * 2
    assert session.last_metrics["tool_calls"] == 1
    with pytest.raises(LoopProtocolError):
        loop.interrupt("cancelled", "again")
    with pytest.raises(LoopProtocolError):
        loop.on_tool_result("a", ok("late"))


def test_next_action_repeats_until_fed() -> None:
    loop = loop_for(make_session())
    first = loop.next_action()
    assert loop.next_action() is first
    loop.on_completion(reply(None, [tc("echo", "{}", "a")]))
    call = loop.next_action()
    assert loop.next_action() is call


def test_wrong_result_fails_the_loop_and_keeps_the_transcript_valid() -> None:
    session = make_session()
    loop = loop_for(session)
    loop.next_action()
    loop.on_completion(reply(None, [tc("echo", "{}", "a"), tc("echo", "{}", "b")]))
    loop.next_action()
    with pytest.raises(LoopProtocolError):
        loop.on_tool_result("b", ok("wrong id"))
    assert loop.state is LoopState.FAILED
    final = loop.next_action()
    assert isinstance(final, Failed) and final.body["error"]["code"] == "internal_error"
    assert session.pending_calls() == []
    with pytest.raises(LoopProtocolError):
        loop.on_completion(reply("late"))
