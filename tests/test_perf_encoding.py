"""The request body joined from a session's kept encodings is byte for byte the
body a full json.dumps of the request gives: for random histories (any
unicode, lone surrogates, tool calls), after every kind of message the
session and the loop append, after the list is changed behind the cache's
back, and on the wire to a real loopback server."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spearpy import _json
from spearpy.backends.base import CompletionRequest
from spearpy.backends.openai import OpenAIBackend
from spearpy.chat.history import History
from spearpy.chat.loop import ToolLoop
from spearpy.chat.protocol import CallTool, Complete, CompletionResult
from spearpy.chat.registry import parse_tool_schema
from spearpy.chat.session import ChatSession
from tests.test_chat_loop_properties import SCHEMAS, limits, outcomes, replies

# Every code point, lone surrogates included: json.dumps keeps them and
# .encode() refuses them, and the joined body must fail the same way.
any_text = st.text(st.characters(codec=None, categories=None), max_size=12)
json_leaf = st.none() | st.booleans() | st.integers() | st.floats() | any_text
json_values = st.recursive(json_leaf, lambda inner: st.lists(inner, max_size=3)
                           | st.dictionaries(any_text, inner, max_size=3), max_leaves=8)
tool_calls = st.lists(st.fixed_dictionaries({
    "id": any_text, "type": st.just("function"),
    "function": st.fixed_dictionaries({"name": any_text, "arguments": any_text})}), max_size=3)
messages = st.one_of(
    st.fixed_dictionaries({"role": st.sampled_from(["system", "user"]), "content": any_text}),
    st.fixed_dictionaries({"role": st.just("assistant"), "content": st.none() | any_text},
                          optional={"tool_calls": tool_calls}),
    st.fixed_dictionaries({"role": st.just("tool"), "tool_call_id": any_text,
                           "content": any_text}),
    st.dictionaries(any_text, json_values, max_size=3),  # whatever a list may hold
)
params = st.dictionaries(st.sampled_from(["temperature", "max_tokens", "model", "messages",
                                          "tools", "stream", "x_extra", "ü"]),
                         json_values, max_size=4)


def _backend() -> OpenAIBackend:
    # Never contacted: payload() is pure.
    return OpenAIBackend(base_url="http://127.0.0.1:9", api_key_env="")


def _full(backend: OpenAIBackend, request: CompletionRequest) -> bytes:
    """What the backend sent before the history kept its encodings."""
    return json.dumps(backend.wire_body(request), separators=(",", ":"),
                      ensure_ascii=False).encode()


def _same_payload(backend: OpenAIBackend, request: CompletionRequest) -> None:
    try:
        expected: bytes | None = _full(backend, request)
    except UnicodeEncodeError:
        expected = None
    if expected is None:
        with pytest.raises(UnicodeEncodeError):
            backend.payload(request)
    else:
        assert backend.payload(request) == expected


@settings(max_examples=120, deadline=None)
@given(st.lists(st.lists(messages, max_size=4), min_size=1, max_size=5), params,
       st.none() | st.lists(st.dictionaries(any_text, json_values, max_size=2), max_size=2),
       st.booleans())
def test_joined_body_is_the_full_encoding(batches: list[list[dict[str, Any]]],
                                          extra: dict[str, Any],
                                          tools: list[dict[str, Any]] | None,
                                          stream: bool) -> None:
    backend = _backend()
    history = History()
    for batch in batches:  # requests in between appends: parts are reused
        history.extend(batch)
        request = CompletionRequest(model="m-ü", messages=history, tools=tools,
                                    params=extra, stream=stream)
        _same_payload(backend, request)


@given(st.lists(messages, min_size=3, max_size=6), messages, st.data())
def test_any_change_to_the_list_is_followed(
        start: list[dict[str, Any]], other: dict[str, Any], data: st.DataObject) -> None:
    history = History(start)
    try:
        history.encoded()
    except UnicodeEncodeError:
        history = History([m for m in start if _encodable(m)])
        if not history:
            return
        history.encoded()
    change = data.draw(st.sampled_from(["replace", "slice", "delete", "del_slice", "insert",
                                        "clear", "pop", "pop_first", "remove", "sort",
                                        "reverse", "repeat", "append", "extend", "iadd"]))
    index = data.draw(st.integers(0, len(history) - 1))
    if change == "replace":
        history[index] = other
    elif change == "slice":
        history[index:] = [other]
    elif change == "delete":
        del history[index]
    elif change == "del_slice":
        del history[index:]
    elif change == "insert":
        history.insert(index, other)
    elif change == "clear":
        history.clear()
        history.append(other)
    elif change == "pop":
        history.pop()
    elif change == "pop_first":
        history.pop(0)
    elif change == "remove":
        history.remove(history[index])
    elif change == "sort":
        history.sort(key=lambda m: len(m), reverse=True)
    elif change == "reverse":
        history.reverse()
    elif change == "repeat":
        history *= 2
    elif change == "append":
        history.append(other)
    elif change == "extend":
        history.extend([other, other])
    else:
        history += [other]
    try:
        expected = _json.compact_bytes(list(history))
    except UnicodeEncodeError:
        return
    assert history.encoded() == expected


def _encodable(message: dict[str, Any]) -> bool:
    try:
        _json.compact_bytes(message)
    except UnicodeEncodeError:
        return False
    return True


def test_a_message_that_cannot_be_encoded_fails_every_request_until_replaced() -> None:
    history = History([{"role": "user", "content": "a"}])
    history.encoded()
    history.append({"role": "user", "content": "\ud800"})
    with pytest.raises(UnicodeEncodeError):
        history.encoded()
    with pytest.raises(UnicodeEncodeError):
        history.encoded()
    history[1] = {"role": "user", "content": "b"}
    assert history.encoded() == b'[{"role":"user","content":"a"},{"role":"user","content":"b"}]'


def test_a_quirk_profile_that_rewrites_messages_is_encoded_in_full() -> None:
    backend = OpenAIBackend(base_url="http://127.0.0.1:9", api_key_env="", quirks="mistral")
    history = History([{"role": "user", "content": "hi"}, {
        "role": "assistant", "content": None, "tool_calls": [
            {"id": "call_abcdefghijklmnop", "type": "function",
             "function": {"name": "f", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "call_abcdefghijklmnop", "content": "1"}])
    history.encoded()
    request = CompletionRequest(model="m", messages=history)
    sent = backend.payload(request)
    assert sent == _full(backend, request)
    assert b"call_abcdefghijklmnop" not in sent  # the profile's ids, not the kept parts


def _session() -> ChatSession:
    session = ChatSession(1000)
    for offset, raw in enumerate(SCHEMAS):
        name, spec = parse_tool_schema(json.dumps(raw).encode())
        session.registry.add(name, 10 + offset, spec)
    session.write_message("user", "start")
    return session


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(limits, st.lists(replies(), max_size=5),
                          st.lists(outcomes, min_size=1, max_size=3),
                          st.sampled_from(["user", "system", "answer", "none"])),
                min_size=1, max_size=4))
def test_every_request_of_the_loop_is_the_full_encoding(
        sends: list[tuple[Any, list[CompletionResult], list[Any], str]]) -> None:
    backend = _backend()
    session = _session()
    for send_limits, script, tool_outcomes, before in sends:
        if before in ("user", "system"):
            session.write_message(before, "more ü \U0001f600")
        elif before == "answer":
            for call in session.pending_calls():
                session.write_message("tool", json.dumps(
                    {"tool_call_id": call.id, "content": {"nested": ["\u2028", 1.5]}}))
        loop = ToolLoop(session, send_limits, auto=True, backend="fake", model="m")
        answers = iter(script)
        calls = 0
        for _ in range(200):
            action = loop.next_action()
            if isinstance(action, Complete):
                request = CompletionRequest(model="m", messages=action.messages,
                                            tools=action.tools, params={"temperature": 0})
                assert isinstance(request.messages, History)
                _same_payload(backend, request)
                loop.on_completion(next(answers, CompletionResult(
                    backend="fake", model="m",
                    body={"choices": [{"message": {"role": "assistant", "content": "end"}}]})))
            elif isinstance(action, CallTool):
                calls += 1
                loop.on_tool_result(action.call.id, tool_outcomes[calls % len(tool_outcomes)])
            else:
                break
        _same_payload(backend, CompletionRequest(model="m", messages=session.messages))
