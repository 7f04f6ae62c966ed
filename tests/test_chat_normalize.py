"""normalize_assistant: provider quirks in, replayable messages out."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import pytest

from spearpy.chat.normalize import (
    first_message,
    normalize_assistant,
    with_session_tool_calls,
)
from spearpy.chat.protocol import ToolCall


def ids() -> Callable[[], str]:
    counter = itertools.count(1)
    return lambda: f"gen{next(counter)}"


def test_plain_reply() -> None:
    message, calls = normalize_assistant(
        {"role": "assistant", "content": "hi", "refusal": None, "reasoning_content": "..."},
        ids(),
    )
    assert message == {"role": "assistant", "content": "hi"}
    assert calls == []


def test_missing_content_without_calls_becomes_empty_string() -> None:
    assert normalize_assistant({"role": "assistant"}, ids())[0] == {
        "role": "assistant",
        "content": "",
    }


def test_content_parts_are_joined() -> None:
    parts = [{"type": "text", "text": "a"}, {"type": "image_url"}, "b", 3]
    message, _ = normalize_assistant({"content": parts}, ids())
    assert message["content"] == "ab"


def test_full_openai_call_is_kept() -> None:
    raw = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "add", "arguments": '{"a": 1}'},
            }
        ],
    }
    message, calls = normalize_assistant(raw, ids())
    assert message == raw
    assert calls == [ToolCall(id="call_1", name="add", arguments='{"a": 1}')]


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ({"a": 1, "b": "é"}, '{"a":1,"b":"é"}'),
        (None, "{}"),
        ("", "{}"),
        ("  ", "{}"),
        ([1, 2], "[1,2]"),
        (5, "5"),
        ("not json", "not json"),
        (float("nan"), "NaN"),
    ],
)
def test_arguments_forms(arguments: object, expected: str) -> None:
    raw = {"tool_calls": [{"id": "c", "function": {"name": "t", "arguments": arguments}}]}
    message, calls = normalize_assistant(raw, ids())
    assert calls[0].arguments == expected
    assert message["tool_calls"][0]["function"]["arguments"] == expected


def test_missing_arguments_id_and_type() -> None:
    message, calls = normalize_assistant({"tool_calls": [{"function": {"name": "t"}}]}, ids())
    assert calls == [ToolCall(id="gen1", name="t", arguments="{}")]
    assert message == {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "gen1", "type": "function", "function": {"name": "t", "arguments": "{}"}}
        ],
    }


def test_legacy_function_call() -> None:
    raw = {"content": None, "function_call": {"name": "add", "arguments": '{"a":1}'}}
    message, calls = normalize_assistant(raw, ids())
    assert calls == [ToolCall(id="gen1", name="add", arguments='{"a":1}')]
    assert "function_call" not in message
    assert message["tool_calls"][0]["id"] == "gen1"


def test_tool_calls_win_over_legacy_function_call() -> None:
    raw = {
        "tool_calls": [{"id": "a", "function": {"name": "one"}}],
        "function_call": {"name": "two"},
    }
    _, calls = normalize_assistant(raw, ids())
    assert [c.name for c in calls] == ["one"]


def test_junk_entries_are_dropped_and_order_kept() -> None:
    raw = {
        "tool_calls": [
            "junk",
            None,
            {"id": "a", "function": {"name": "first"}},
            {"id": "b", "function": {"arguments": "{}"}},  # no name
            {"id": "c", "function": {"name": ""}},
            {"id": "d", "function": "x", "name": "flat", "arguments": {"k": 1}},
            {"id": "e", "type": "function", "function": {"name": "last"}},
        ]
    }
    _, calls = normalize_assistant(raw, ids())
    assert [(c.id, c.name) for c in calls] == [("a", "first"), ("d", "flat"), ("e", "last")]
    assert calls[1].arguments == '{"k":1}'


def test_single_dict_tool_calls_and_non_list() -> None:
    _, calls = normalize_assistant({"tool_calls": {"id": "a", "function": {"name": "t"}}}, ids())
    assert [c.id for c in calls] == ["a"]
    assert normalize_assistant({"tool_calls": "nope"}, ids())[1] == []


def test_duplicate_and_previously_used_ids_are_replaced() -> None:
    raw = {
        "tool_calls": [
            {"id": "x", "function": {"name": "t"}},
            {"id": "x", "function": {"name": "t"}},
            {"id": "old", "function": {"name": "t"}},
            {"id": 5, "function": {"name": "t"}},
            {"id": "  ", "function": {"name": "t"}},
        ]
    }
    _, calls = normalize_assistant(raw, ids(), used_ids={"old"})
    assert [c.id for c in calls] == ["x", "gen1", "gen2", "gen3", "gen4"]


def test_factory_collisions_are_skipped() -> None:
    produced = iter(["x", "x", "y"])
    raw = {"tool_calls": [{"id": "x", "function": {"name": "t"}}, {"function": {"name": "t"}}]}
    _, calls = normalize_assistant(raw, lambda: next(produced))
    assert [c.id for c in calls] == ["x", "y"]


def test_broken_factory_raises() -> None:
    raw = {"tool_calls": [{"id": "x", "function": {"name": "t"}}, {"function": {"name": "t"}}]}
    with pytest.raises(RuntimeError):
        normalize_assistant(raw, lambda: "x")


def test_finish_reason_is_ignored() -> None:
    # Several servers say "stop" with tool calls present, or "tool_calls" with none.
    _, calls = normalize_assistant({"tool_calls": [{"function": {"name": "t"}}]}, ids())
    assert len(calls) == 1


@pytest.mark.parametrize(
    "body",
    [None, [], {}, {"choices": []}, {"choices": "x"}, {"choices": [1]}, {"choices": [{}]}],
)
def test_first_message_rejects_unusable_bodies(body: object) -> None:
    assert first_message(body) is None


def test_with_session_tool_calls_does_not_touch_the_original() -> None:
    body: dict[str, Any] = {
        "id": "r",
        "choices": [
            {"message": {"content": None, "tool_calls": ["junk"], "x": 1}, "finish_reason": "t"}
        ],
    }
    appended = {"role": "assistant", "content": None, "tool_calls": [{"id": "gen1"}]}
    out = with_session_tool_calls(body, appended)
    assert out["choices"][0]["message"] == {
        "content": None,
        "tool_calls": [{"id": "gen1"}],
        "x": 1,
    }
    assert out["choices"][0]["finish_reason"] == "t"
    assert body["choices"][0]["message"]["tool_calls"] == ["junk"]
