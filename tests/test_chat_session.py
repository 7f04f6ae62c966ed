"""ChatSession: messages, params and the pending-call bookkeeping."""

from __future__ import annotations

import json

import pytest

from spearpy import abi
from spearpy.chat.session import ChatSession


def reply_with_calls(*ids: str) -> dict[str, object]:
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": i, "type": "function", "function": {"name": "t", "arguments": "{}"}} for i in ids
        ],
    }


def tool_msg(call_id: str, content: object) -> str:
    return json.dumps({"tool_call_id": call_id, "content": content})


@pytest.mark.parametrize("role", sorted(abi.ROLES - {"tool"}))
def test_write_message_appends(role: str) -> None:
    session = ChatSession(1000)
    assert session.write_message(role, "héllo") == 0
    assert session.messages == [{"role": role, "content": "héllo"}]


@pytest.mark.parametrize("role", ["", "function", "System", "bot"])
def test_unknown_role_is_einval(role: str) -> None:
    session = ChatSession(1000)
    assert session.write_message(role, "x") == abi.EINVAL
    assert session.messages == []


def test_tool_message_answers_a_pending_call() -> None:
    session = ChatSession(1000)
    session.append_reply(reply_with_calls("a", "b"))
    assert [c.id for c in session.pending_calls()] == ["a", "b"]
    assert session.write_message("tool", tool_msg("b", "B")) == 0
    assert session.write_message("tool", tool_msg("a", {"x": [1, "é"]})) == 0
    assert session.pending_calls() == []
    assert session.messages[-2:] == [
        {"role": "tool", "tool_call_id": "b", "content": "B"},
        {"role": "tool", "tool_call_id": "a", "content": '{"x":[1,"é"]}'},
    ]


@pytest.mark.parametrize(
    "content",
    [
        "plain text",
        "{bad json",
        '["a"]',
        json.dumps({"tool_call_id": "a"}),  # no content
        json.dumps({"content": "x"}),  # no id
        json.dumps({"tool_call_id": 1, "content": "x"}),
        json.dumps({"tool_call_id": "zzz", "content": "x"}),  # unknown id
        '{"tool_call_id": "a", "content": NaN}',
    ],
)
def test_bad_tool_messages_are_einval(content: str) -> None:
    session = ChatSession(1000)
    session.append_reply(reply_with_calls("a"))
    before = list(session.messages)
    assert session.write_message("tool", content) == abi.EINVAL
    assert session.messages == before
    assert [c.id for c in session.pending_calls()] == ["a"]


def test_answering_twice_is_einval() -> None:
    session = ChatSession(1000)
    session.append_reply(reply_with_calls("a"))
    assert session.write_message("tool", tool_msg("a", "1")) == 0
    assert session.write_message("tool", tool_msg("a", "2")) == abi.EINVAL
    assert sum(m.get("tool_call_id") == "a" for m in session.messages) == 1


def test_tool_message_without_pending_calls_is_einval() -> None:
    session = ChatSession(1000)
    session.write_message("user", "hi")
    assert session.write_message("tool", tool_msg("a", "x")) == abi.EINVAL


def test_moving_on_answers_pending_calls_as_not_run() -> None:
    session = ChatSession(1000)
    session.append_reply(reply_with_calls("a", "b"))
    session.write_message("tool", tool_msg("a", "done"))
    assert session.write_message("user", "never mind") == 0
    assert session.pending_calls() == []
    tool_b = session.messages[-2]
    assert tool_b["tool_call_id"] == "b"
    assert json.loads(tool_b["content"])["error"]["code"] == "not_run"
    assert session.messages[-1] == {"role": "user", "content": "never mind"}


def test_set_param_stores_checks_and_unsets() -> None:
    session = ChatSession(1000)
    assert session.set_param("temperature", 0.3) == 0
    assert session.set_param("max_tool_calls", 4) == 0
    assert session.set_param("n", 2) == abi.EINVAL
    assert session.set_param("mcp.servers", []) == abi.EACCES
    assert session.set_param("max_iterations", "3") == abi.EINVAL
    assert session.params == {"temperature": 0.3, "max_total_tool_calls": 4}
    assert session.set_param("max_total_tool_calls", 9) == 0
    assert session.params["max_total_tool_calls"] == 9  # alias and name share a slot
    assert session.set_param("temperature", None) == 0
    assert "temperature" not in session.params


def test_generated_ids_are_fresh_and_never_reused() -> None:
    session = ChatSession(1000)
    no_ids = {"tool_calls": [{"function": {"name": "t"}}, {"function": {"name": "t"}}]}
    _, first = session.append_reply(no_ids)
    session.abandon_pending()
    # The model echoes one of our generated ids and repeats its own.
    echo = reply_with_calls(first[0].id, "x", "x")
    _, second = session.append_reply(echo)
    ids = [c.id for c in first + second]
    assert len(set(ids)) == len(ids) == 5
    assert second[1].id == "x"
    assert all(len(i) == 9 and i.isalnum() for i in ids if i != "x")


def test_injected_id_factory() -> None:
    counter = iter(range(100))
    session = ChatSession(7, id_factory=lambda: f"id{next(counter)}")
    _, calls = session.append_reply({"tool_calls": [{"function": {"name": "t"}}]})
    assert calls[0].id == "id0"
    assert session.fd == 7
