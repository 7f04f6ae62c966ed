"""The per-step shortcuts of the tool loop (issue 19, P5) give the same
answers as the plain paths: feeding a result with advance=True returns what
next_action() would, the session's appended size is what a send charges,
and _json.loads' direct scanner call agrees with json.loads."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from typing import Any

import pytest

from spearpy import _json
from spearpy.chat.protocol import (
    Action,
    CallTool,
    Complete,
    CompletionResult,
    Done,
    Failed,
    ToolOutcome,
)
from tests.test_chat_loop import loop_for, make_session, reply, tc


def _script() -> list[CompletionResult]:
    return [
        reply(None, [tc("add", {"a": 1, "b": 2}, "c1"), tc("nope", "{}", "c2"),
                     tc("add", '{"a": "x"}', "c3"), tc("echo", "{}", "c4")], total=4),
        reply(None, [tc("add", {"a": 3, "b": 4}, "c5")], total=4),
        reply("done", total=2),
    ]


def _outcomes() -> Iterator[ToolOutcome]:
    yield ToolOutcome(ok=True, output="3")
    yield ToolOutcome(ok=True, output="é" * 3)  # not ASCII: the checked path
    yield ToolOutcome(ok=False, error_code="tool_exec_failed", error_message="boom")
    while True:
        yield ToolOutcome(ok=True, output="x" * 100)  # over max_tool_output_bytes


def _drive(advance: bool, **limits: Any) -> tuple[Done | Failed, list[Action], list[Any], int]:
    session = make_session()
    loop = loop_for(session, **limits)
    script, outcomes = iter(_script()), _outcomes()
    actions: list[Action] = []
    action = loop.next_action()
    while not isinstance(action, Done | Failed):
        actions.append(action)
        if isinstance(action, Complete):
            result = next(script)
            if advance:
                action = loop.on_completion(result, True)
            else:
                loop.on_completion(result)
                action = loop.next_action()
        else:
            assert isinstance(action, CallTool)
            outcome = next(outcomes)
            if advance:
                action = loop.on_tool_result(action.call.id, outcome, True)
            else:
                loop.on_tool_result(action.call.id, outcome)
                action = loop.next_action()
        assert loop.next_action() is action  # what was returned is what is outstanding
    return action, actions, copy.deepcopy(list(session.messages)), session.appended_chars


@pytest.mark.parametrize("limits", [{}, {"max_tool_output_bytes": 50},
                                    {"max_total_tool_calls": 2}, {"max_iterations": 1},
                                    {"cache_tool_results": True}, {"strict_tools": True}])
def test_advance_gives_what_next_action_gives(limits: dict[str, Any]) -> None:
    final, actions, messages, size = _drive(True, **limits)
    plain_final, plain_actions, plain_messages, plain_size = _drive(False, **limits)
    assert final == plain_final and messages == plain_messages and size == plain_size
    assert [type(a) for a in actions] == [type(a) for a in plain_actions]
    assert [a.call.id for a in actions if isinstance(a, CallTool)] == \
        [a.call.id for a in plain_actions if isinstance(a, CallTool)]


def test_appended_chars_counts_what_the_messages_hold() -> None:
    session = make_session()
    start = session.appended_chars
    _final, _actions, messages, size = _drive(True)
    # What the send charged before: content, and each call's name and arguments.
    expected = 0
    for message in messages[1:]:
        if isinstance(message.get("content"), str):
            expected += len(message["content"])
        for call in message.get("tool_calls") or ():
            expected += len(call["function"]["arguments"]) + len(call["function"]["name"])
    assert size - start == expected


@pytest.mark.parametrize("text", [
    '{"a":1}', ' {"a": 1}', '{"a": 1} ', '{"a": 1}\n', "", " ", "[1,2", '{"a":1} x',
    "\ufeff{}", "NaN", "[Infinity]", '"\\ud800"', "1e400", "-0", '{"a":"\\u00e9"}',
])
@pytest.mark.parametrize("allow_nan", [True, False])
def test_loads_agrees_with_json_loads(text: str, allow_nan: bool) -> None:
    def reference() -> Any:
        if allow_nan:
            return json.loads(text)
        return json.JSONDecoder(parse_constant=_refuse).decode(text)

    try:
        expected: Any = reference()
    except ValueError as exc:
        with pytest.raises(type(exc)) as raised:
            _json.loads(text, allow_nan=allow_nan)
        assert str(raised.value) == str(exc)
        return
    got = _json.loads(text, allow_nan=allow_nan)
    if text == '"\\ud800"':
        assert got == "\ufffd"  # lone surrogates are replaced, as before
    else:
        assert json.dumps(got) == json.dumps(expected)


def _refuse(token: str) -> object:
    raise ValueError(f"{token} is not valid JSON")
