"""Hypothesis: ToolLoop driven by random scripts keeps every invariant.

Each example runs a few sends on one session: random replies (content, tool
calls with random/missing/duplicate ids, unknown names, bad arguments, legacy
function_call, junk entries, upstream errors, unusable bodies), random tool
outcomes, random limits, random guest actions between sends and random
interrupts. After every send the transcript must be valid for a strict
upstream, counters within limits, and the body well formed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spearpy import abi
from spearpy.chat.loop import LOOP_ERROR_CODES, LoopState, ToolLoop
from spearpy.chat.protocol import (
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

SCHEMAS = [
    {
        "name": "add",
        "parameters": {
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
            "required": ["a", "b"],
        },
    },
    {"name": "echo"},
    {"name": "free", "parameters": {"type": "object"}},
]
UPSTREAM_CODES = ["upstream_http_error", "upstream_unreachable", "upstream_bad_json"]
INTERRUPT_CODE = "deadline_exceeded"
SKIP_CODES = {abi.TOOL_UNKNOWN, abi.TOOL_INVALID_ARGUMENTS, "cache_hit", "not_run", INTERRUPT_CODE}
MAX_ACTIONS = 500

# ---- strategies -----------------------------------------------------------------

ids = st.one_of(
    st.none(), st.sampled_from(["a", "b", "sp0000001", "sp0000002", "", "  "]), st.integers()
)
names = st.sampled_from(["add", "echo", "free", "nope", ""])
arguments = st.one_of(
    st.none(),
    st.sampled_from(
        [
            "",
            "{}",
            '{"a":1,"b":2}',
            '{"b": 2, "a": 1}',
            '{"a":"x"}',
            "not json",
            "[1]",
            '{"a": NaN}',
            '{"a":1}',
        ]
    ),
    st.dictionaries(
        st.sampled_from(["a", "b", "k"]), st.integers(-2, 2) | st.text(max_size=2), max_size=3
    ),
)


@st.composite
def call_entries(draw: st.DrawFn) -> object:
    if draw(st.integers(0, 9)) == 0:
        return draw(st.sampled_from([None, 1, "junk", [], {"id": "z"}]))
    fn: dict[str, Any] = {"name": draw(names)}
    args = draw(arguments)
    if args is not None or draw(st.booleans()):
        fn["arguments"] = args
    entry: dict[str, Any] = {}
    if draw(st.booleans()):
        entry.update(fn)  # flattened form
    else:
        entry["function"] = fn
    call_id = draw(ids)
    if call_id is not None:
        entry["id"] = call_id
    if draw(st.booleans()):
        entry["type"] = "function"
    return entry


usage = st.one_of(
    st.none(),
    st.builds(
        lambda p, c: {"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c},
        st.integers(0, 30),
        st.integers(0, 30),
    ),
    st.just({"total_tokens": "many"}),
)


def body_with(message: dict[str, Any], used: object) -> dict[str, Any]:
    body: dict[str, Any] = {"id": "r", "choices": [{"index": 0, "message": message}]}
    if used is not None:
        body["usage"] = used
    return body


@st.composite
def replies(draw: st.DrawFn) -> CompletionResult:
    kind = draw(st.sampled_from(["calls"] * 5 + ["final"] * 2 + ["legacy", "error", "bad"]))
    content = draw(st.none() | st.text(max_size=4))
    used = draw(usage)
    if kind == "calls":
        message: dict[str, Any] = {"role": "assistant", "content": content}
        message["tool_calls"] = draw(st.lists(call_entries(), max_size=4))
        body: object = body_with(message, used)
    elif kind == "final":
        body = body_with({"role": "assistant", "content": content}, used)
    elif kind == "legacy":
        fc = {"name": draw(names), "arguments": draw(arguments)}
        body = body_with({"role": "assistant", "content": None, "function_call": fc}, used)
    elif kind == "bad":
        body = draw(st.sampled_from([None, {}, {"choices": []}, {"choices": [{"text": "x"}]}]))
    else:
        error = UpstreamError(
            code=draw(st.sampled_from(UPSTREAM_CODES)),
            message="upstream trouble",
            status=draw(st.none() | st.integers(400, 599)),
        )
        return CompletionResult(backend="fake", model="m", error=error)
    return CompletionResult(backend="fake", model="m", body=body)  # type: ignore[arg-type]


outcomes = st.one_of(
    st.builds(lambda out: ToolOutcome(ok=True, output=out), st.text(max_size=12)),
    st.builds(
        lambda code: ToolOutcome(ok=False, error_code=code, error_message="boom", rc=-1),
        st.sampled_from(["tool_exec_failed", "output_too_large", None]),
    ),
)

limits = st.builds(
    LoopLimits,
    max_iterations=st.integers(0, 5),
    max_total_tool_calls=st.integers(0, 6),
    max_tool_output_bytes=st.integers(0, 24),
    max_total_tokens=st.none() | st.integers(0, 80),
    strict_tools=st.booleans(),
    cache_tool_results=st.booleans(),
    validate_tool_args=st.booleans(),
)


@dataclass
class Send:
    auto: bool
    limits: LoopLimits
    script: list[CompletionResult]
    outcomes: list[ToolOutcome]
    before: str
    interrupt_at: int | None
    metrics: bool


sends = st.builds(
    Send,
    auto=st.booleans(),
    limits=limits,
    script=st.lists(replies(), max_size=7),
    outcomes=st.lists(outcomes, min_size=1, max_size=4),
    before=st.sampled_from(["nothing", "user", "answer_first", "answer_all"]),
    interrupt_at=st.none() | st.integers(0, 12),
    metrics=st.booleans(),
)

FALLBACK = CompletionResult(
    backend="fake", model="m", body=body_with({"role": "assistant", "content": "end"}, None)
)

# ---- checks ------------------------------------------------------------------------


def check_transcript(messages: list[dict[str, Any]], pending: list[str]) -> None:
    """Every tool_call_id answered once, right after its assistant, in call order."""
    seen: set[str] = set()
    i = 0
    while i < len(messages):
        message = messages[i]
        assert message["role"] in abi.ROLES
        assert message["role"] != "tool", f"stray tool message at {i}"
        i += 1
        if message["role"] != "assistant":
            assert isinstance(message["content"], str)
            continue
        assert set(message) <= {"role", "content", "tool_calls"}
        assert message["content"] is None or isinstance(message["content"], str)
        calls = message.get("tool_calls", [])
        assert calls or "tool_calls" not in message
        call_ids = []
        for call in calls:
            assert set(call) == {"id", "type", "function"} and call["type"] == "function"
            assert set(call["function"]) == {"name", "arguments"}
            assert isinstance(call["function"]["name"], str) and call["function"]["name"]
            assert isinstance(call["function"]["arguments"], str)
            call_ids.append(call["id"])
        assert len(set(call_ids)) == len(call_ids) and not seen & set(call_ids)
        seen.update(call_ids)
        answered = []
        while i < len(messages) and messages[i]["role"] == "tool":
            assert set(messages[i]) == {"role", "tool_call_id", "content"}
            assert isinstance(messages[i]["content"], str)
            answered.append(messages[i]["tool_call_id"])
            i += 1
        open_ids = pending if i == len(messages) else []
        assert answered == [c for c in call_ids if c not in open_ids]
    json.dumps(messages, allow_nan=False)


def apply_before(session: ChatSession, before: str) -> None:
    pending = session.pending_calls()
    if before == "user":
        assert session.write_message("user", "more") == 0
    elif before in ("answer_first", "answer_all") and pending:
        for call in pending[: 1 if before == "answer_first" else None]:
            payload = json.dumps({"tool_call_id": call.id, "content": "by guest"})
            assert session.write_message("tool", payload) == 0


def run_send(session: ChatSession, send: Send) -> None:
    apply_before(session, send.before)
    pending_before = session.pending_calls()
    loop = ToolLoop(
        session,
        send.limits,
        auto=send.auto,
        backend="fake",
        model="m",
        metrics_enabled=send.metrics,
        clock=lambda: 0.0,
    )
    script = iter(send.script)
    completes = calls = 0
    registry = session.registry
    final: Done | Failed | None = None
    for step in range(MAX_ACTIONS):
        if send.interrupt_at == step and loop.final is None:
            final = loop.interrupt(INTERRUPT_CODE, "deadline passed")
            assert loop.state is LoopState.INTERRUPTED
            break
        action = loop.next_action()
        budget = send.limits.max_total_tokens
        over_budget = budget is not None and loop.stats.usage.total_tokens > budget
        if isinstance(action, Complete | CallTool) and send.auto and completes:
            assert not over_budget, "the send went on past max_total_tokens"
        if isinstance(action, Complete):
            completes += 1
            assert action.iteration == completes
            assert action.messages is session.messages and action.tools is registry.specs()
            loop.on_completion(next(script, FALLBACK))
        elif isinstance(action, CallTool):
            calls += 1
            tool = registry.get(action.call.name)
            assert tool is not None and tool is action.tool
            parsed = json.loads(action.arguments)
            if send.limits.validate_tool_args:
                assert isinstance(parsed, dict) and tool.validate(parsed) is None
            outcome = send.outcomes[calls % len(send.outcomes)]
            loop.on_tool_result(action.call.id, outcome)
        else:
            final = action
            break
        assert loop.stats.iterations == completes and loop.stats.tool_calls == calls
    assert final is not None, "the loop did not terminate"
    assert loop.next_action() is final

    spear = final.body["_spear"]
    assert spear["iterations"] == completes and spear["tool_calls"] == calls
    assert set(spear) == {"backend", "model", "iterations", "tool_calls", "usage", "elapsed_ms"}
    if send.auto:
        assert completes <= send.limits.max_iterations
        assert calls <= send.limits.max_total_tool_calls
        assert session.pending_calls() == []  # the invariant of every auto send
    else:
        assert completes <= 1 and calls == 0

    if isinstance(final, Done):
        assert loop.state is LoopState.COMPLETED
        assert "choices" in final.body and "error" not in final.body
        message = final.body["choices"][0]["message"]
        open_ids = [c.id for c in session.pending_calls()]
        assert [c["id"] for c in message.get("tool_calls", [])] == open_ids
    else:
        code = final.body["error"]["code"]
        assert "choices" not in final.body
        assert code in LOOP_ERROR_CODES | set(UPSTREAM_CODES) | {INTERRUPT_CODE}
        if code == abi.SEND_PENDING_TOOL_CALLS:
            assert not send.auto and completes == 0
            assert session.pending_calls() == pending_before
        elif not send.auto:
            assert session.pending_calls() == []

    if send.metrics:
        assert session.last_metrics == {
            **spear["usage"],
            "iterations": completes,
            "tool_calls": calls,
            "elapsed_ms": 0,
        }
    else:
        assert session.last_metrics == {}

    for note in loop.drain_notes():
        if isinstance(note, LimitHit):
            assert note.limit in {"max_iterations", "max_total_tool_calls", "max_total_tokens"}
        else:
            assert isinstance(note, ToolSkipped) and note.code in SKIP_CODES
    json.dumps(final.body, allow_nan=False, separators=(",", ":"))
    check_transcript(session.messages, [c.id for c in session.pending_calls()])


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(sends, min_size=1, max_size=3))
def test_random_sends_keep_every_invariant(plan: list[Send]) -> None:
    session = ChatSession(1000)
    for offset, raw in enumerate(SCHEMAS):
        name, spec = parse_tool_schema(json.dumps(raw).encode())
        session.registry.add(name, 10 + offset, spec)
    session.write_message("user", "start")
    for send in plan:
        run_send(session, send)
