"""A hostile upstream: faults, storms, lies. Every send ends with an answer or a
structured error body, never a hang, and the session transcript stays valid.

The model's lies and faults mid-conversation go through real sends from the
WAT probe guest to `spearpy.testing.ScriptedServer` over loopback HTTP; the
retry policy itself is checked on the backend in test_hostile_retry.py.
`pytest -m long` runs the full fault matrix.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from spearpy import abi
from spearpy.backends.base import CompletionRequest
from spearpy.backends.openai import OpenAIBackend
from spearpy.fds import ChatSessionFd
from spearpy.retry import RetryPolicy
from spearpy.testing import ScriptedServer
from tests.probe import Probe, tool_schema, wat_module

# A hostcall that hits a host bug answers EIO and logs; here it fails the test.
pytestmark = pytest.mark.usefixtures("no_host_bugs")

HANG_GUARD_S = 60.0
PROBE = wat_module("probe.wat")
ECHO = 0
TOOL_ROLES = {"system", "user", "assistant", "tool", "developer"}


def assert_valid_transcript(messages: list[dict[str, Any]], *, pending_ok: bool = False) -> None:
    """What any strict OpenAI-compatible upstream accepts: every tool_call id is
    unique in the session and answered exactly once, by tool messages right
    after its assistant message, in call order. `pending_ok`: the calls of the
    last assistant message may still be unanswered (after a plain send)."""
    seen: set[str] = set()
    i = 0
    while i < len(messages):
        message = messages[i]
        assert message.get("role") in TOOL_ROLES, message
        assert message["role"] != "tool", f"tool message {i} answers no call: {message}"
        calls = message.get("tool_calls") or []
        i += 1
        if message["role"] != "assistant" or not calls:
            continue
        ids = [c["id"] for c in calls]
        assert all(isinstance(x, str) and x for x in ids), calls
        assert len(set(ids)) == len(ids) and not seen & set(ids), f"reused ids {ids}"
        seen |= set(ids)
        for call in calls:
            assert call["type"] == "function" and isinstance(call["function"]["name"], str)
            assert isinstance(call["function"]["arguments"], str)
        answered = []
        while i < len(messages) and messages[i].get("role") == "tool":
            answered.append(messages[i]["tool_call_id"])
            assert isinstance(messages[i]["content"], str)
            i += 1
        if pending_ok and i == len(messages):
            assert answered == ids[:len(answered)], (ids, answered)
        else:
            assert answered == ids, (ids, answered)


# ---- a hostile model inside real sends ---------------------------------------------------


def send(p: Probe, fd: int, flags: int) -> dict[str, Any]:
    """One send; its body must be an answer or a structured error."""
    rfd = p.hc("cchat_send", fd, flags)
    assert rfd >= 0, rfd
    body = p.recv_json(rfd)
    assert "_spear" in body
    if "error" in body:
        assert isinstance(body["error"]["code"], str) and body["error"]["code"]
        assert isinstance(body["error"]["message"], str)
    else:
        assert isinstance(body["choices"][0]["message"], dict)
    return body


def session(p: Probe, *, arena: bool = False, timeout_ms: int | None = None) -> int:
    fd = int(p.hc("cchat_create"))
    assert p.write_fn(fd, ECHO, tool_schema("echo")) == 0
    if arena:
        assert p.set_param(fd, "tool_arena_ptr", 200_000) == 0
        assert p.set_param(fd, "tool_arena_len", 32_768) == 0
    if timeout_ms is not None:
        assert p.set_param(fd, "timeout_ms", timeout_ms) == 0
    assert p.write_msg(fd, "user", "go") == 0
    return fd


def messages_of(p: Probe, fd: int) -> list[dict[str, Any]]:
    return list(p.run.fds.get(fd, ChatSessionFd).session.messages)


def call(name: str, arguments: Any = None, call_id: str | None = None,
         **extra: Any) -> dict[str, Any]:
    entry: dict[str, Any] = {"name": name, "arguments": {} if arguments is None else arguments,
                             **extra}
    if call_id is not None:
        entry["id"] = call_id
    return entry


@pytest.fixture
def guest(make_host: Any, scripted: Any) -> Iterator[Any]:
    """guest(script, **host_config) -> Probe talking to a scripted upstream."""
    probes: list[Probe] = []

    def make(script: Any, **config: Any) -> Probe:
        server = scripted(script)
        config.setdefault("base_url", server.base_url)
        p = Probe(make_host(**config), PROBE)
        p.server = server  # type: ignore[attr-defined]
        probes.append(p)
        return p

    yield make
    for p in probes:
        p.close()


def test_endless_tool_calls_end_at_the_iteration_limit(guest: Any) -> None:
    p = guest({"default": {"tool_calls": [call("echo", {"n": 1}), call("echo", {"n": 2})]}})
    fd = session(p)
    body = send(p, fd, abi.SEND_AUTO_TOOL_CALL)
    assert body["error"]["code"] == "tool_call_limit"
    assert body["_spear"]["iterations"] == 8
    assert_valid_transcript(messages_of(p, fd))
    # The session is still usable: a plain send after the limit goes upstream again.
    assert p.write_msg(fd, "user", "stop now") == 0
    send(p, fd, 0)
    assert_valid_transcript(messages_of(p, fd), pending_ok=True)


def test_tool_call_storm_in_one_turn_hits_the_tool_limit(guest: Any) -> None:
    storm = [call("echo", {"i": i}) for i in range(200)]
    p = guest({"rules": [{"when": {"no_tool_message": True}, "reply": {"tool_calls": storm}}],
               "default": {"content": "done"}})
    fd = session(p)
    body = send(p, fd, abi.SEND_AUTO_TOOL_CALL)
    assert body["error"]["code"] == "tool_call_limit"
    messages = messages_of(p, fd)
    assert_valid_transcript(messages)
    assert sum(1 for m in messages if m["role"] == "tool") == 200


def test_unknown_tool_names_go_back_to_the_model(guest: Any) -> None:
    p = guest({"rules": [{"when": {"no_tool_message": True},
                          "reply": {"tool_calls": [call("rm_rf"), call("../../etc/passwd"),
                                                   call("echo", {"ok": True})]}}],
               "default": {"content": "recovered"}})
    fd = session(p)
    body = send(p, fd, abi.SEND_AUTO_TOOL_CALL)
    assert body["choices"][0]["message"]["content"] == "recovered"
    tools = [m for m in messages_of(p, fd) if m["role"] == "tool"]
    assert [json.loads(t["content"]).get("error", {}).get("code") for t in tools] == [
        "unknown_tool", "unknown_tool", None]
    assert_valid_transcript(messages_of(p, fd))


def test_reused_and_missing_tool_call_ids_are_made_unique(guest: Any) -> None:
    p = guest({"rules": [
        {"when": {"tool_messages": 0},
         "reply": {"tool_calls": [call("echo", {"a": 1}, "dup"), call("echo", {"a": 2}, "dup"),
                                  call("echo", {"a": 3}, "")]}},
        {"when": {"tool_messages": 3},
         "reply": {"tool_calls": [call("echo", {"a": 4}, "dup")]}},
    ], "default": {"content": "done"}})
    fd = session(p)
    body = send(p, fd, abi.SEND_AUTO_TOOL_CALL)
    assert body["choices"][0]["message"]["content"] == "done"
    messages = messages_of(p, fd)
    assert_valid_transcript(messages)
    assert [m["content"] for m in messages if m["role"] == "tool"] == [
        '{"a":1}', '{"a":2}', '{"a":3}', '{"a":4}']


def test_malformed_tool_calls_are_normalised_or_dropped(guest: Any) -> None:
    raw = {"id": "x", "object": "chat.completion", "model": "m", "choices": [{
        "index": 0, "finish_reason": "tool_calls", "message": {
            "role": "assistant", "content": [{"type": "text", "text": "thinking"}],
            "reasoning_content": "hidden",
            "tool_calls": [
                {"function": {"name": "echo", "arguments": {"as": "object"}}},  # no id/type
                "not an object",
                {"id": "c2", "type": "function", "function": {"arguments": "{}"}},  # no name
                {"id": "c3", "type": "function", "function": {"name": "echo"}},  # no arguments
                {"id": "c4", "name": "echo", "arguments": "{not json"},  # flattened, bad JSON
            ]}}]}
    p = guest({"rules": [{"when": {"no_tool_message": True}, "reply": {"raw": raw}}],
               "default": {"content": "done"}})
    fd = session(p)
    body = send(p, fd, abi.SEND_AUTO_TOOL_CALL)
    assert body["choices"][0]["message"]["content"] == "done"
    messages = messages_of(p, fd)
    assert_valid_transcript(messages)
    tools = [m["content"] for m in messages if m["role"] == "tool"]
    assert tools[0] == '{"as":"object"}' and tools[1] == "{}"
    assert json.loads(tools[2])["error"]["code"] == "invalid_arguments"


def test_legacy_function_call_is_run(guest: Any) -> None:
    raw = {"choices": [{"message": {"role": "assistant", "content": None,
                                    "function_call": {"name": "echo",
                                                      "arguments": '{"legacy":1}'}}}]}
    p = guest({"rules": [{"when": {"no_tool_message": True}, "reply": {"raw": raw}}],
               "default": {"content": "final: {{last_tool}}"}})
    fd = session(p)
    body = send(p, fd, abi.SEND_AUTO_TOOL_CALL)
    assert body["choices"][0]["message"]["content"] == 'final: {"legacy":1}'
    assert_valid_transcript(messages_of(p, fd))


# Faults the model's server can throw at any point of a conversation.
FAULTS: dict[str, tuple[dict[str, Any], str]] = {
    "garbage": ({"fault": "garbage"}, "upstream_bad_json"),
    # Nested far deeper than Python's parser recurses: refused before parsing.
    "deep": ({"body_text": '{"choices":' + "[" * 5000 + "]" * 5000 + "}"}, "upstream_bad_json"),
    "storm-500": ({"status": 500}, "upstream_http_error"),
    "storm-503": ({"status": 503, "headers": {"Retry-After": "0"}}, "upstream_http_error"),
    "rate-limited": ({"status": 429, "headers": {"retry-after-ms": "10"}},
                     "upstream_http_error"),
    "reset": ({"fault": "reset"}, "upstream_protocol_error"),
    "truncate": ({"fault": "truncate", "content": "half of this goes missing"},
                 "upstream_protocol_error"),
    "slow": ({"content": "too late", "delay_ms": 5000}, "upstream_timeout"),
    "no-choices": ({"raw": {"object": "chat.completion"}}, "upstream_bad_response"),
    "html": ({"status": 502, "body_text": "<html>bad gateway</html>"}, "upstream_http_error"),
    "quota": ({"status": 429, "error": {"message": "quota", "code": "insufficient_quota"}},
              "upstream_http_error"),
    "auth": ({"status": 401, "error": "Incorrect API key provided"}, "upstream_http_error"),
}


def fault_script(fault: dict[str, Any], where: str, times: int | None) -> dict[str, Any]:
    """`where`: "first" = the first completion fails; "mid" = after a tool turn."""
    first = {"tool_calls": [call("echo", {"k": "v"})]}
    rule: dict[str, Any] = {"reply": fault}
    if times is not None:
        rule["times"] = times
    if where == "first":
        return {"rules": [rule], "default": {"content": "recovered"}}
    rule["when"] = {"tool_messages": 1}
    return {"rules": [{"when": {"tool_messages": 0}, "reply": first}, rule],
            "default": {"content": "recovered"}}


def check_fault(guest: Any, name: str, where: str, *, transient: bool, auto: bool,
                arena: bool) -> None:
    fault, code = FAULTS[name]
    p = guest(fault_script(fault, where, 1 if transient else None), max_retries=1,
              request_timeout=0.3)
    fd = session(p, arena=arena)
    handle: list[dict[str, Any]] = []
    worker = threading.Thread(target=lambda: handle.append(
        send(p, fd, abi.SEND_AUTO_TOOL_CALL if auto else 0)), daemon=True)
    worker.start()
    worker.join(HANG_GUARD_S)
    assert not worker.is_alive(), "the send hung"
    body = handle[0]
    finals = {"garbage", "deep", "no-choices", "quota", "auth"}  # not retried
    if transient and name not in finals:
        if where == "first" or auto:
            assert "error" not in body, body
    elif where == "first" or auto:
        assert body["error"]["code"] == code, body
    assert_valid_transcript(messages_of(p, fd), pending_ok=not auto)


@pytest.mark.parametrize("name", sorted(FAULTS))
@pytest.mark.parametrize("where", ["first", "mid"])
def test_faults_end_every_send(guest: Any, name: str, where: str) -> None:
    check_fault(guest, name, where, transient=False, auto=True, arena=False)


@pytest.mark.parametrize("name", ["storm-503", "reset", "slow", "truncate"])
def test_transient_faults_are_retried_away(guest: Any, name: str) -> None:
    check_fault(guest, name, "mid", transient=True, auto=True, arena=False)


@pytest.mark.long
@pytest.mark.parametrize("name", sorted(FAULTS))
@pytest.mark.parametrize("where", ["first", "mid"])
@pytest.mark.parametrize("transient", [False, True], ids=["persistent", "transient"])
@pytest.mark.parametrize("auto", [False, True], ids=["plain", "auto"])
@pytest.mark.parametrize("arena", [False, True], ids=["allocator", "arena"])
def test_full_fault_matrix(guest: Any, name: str, where: str, transient: bool, auto: bool,
                           arena: bool) -> None:
    check_fault(guest, name, where, transient=transient, auto=auto, arena=arena)


def test_a_failed_send_leaves_a_session_the_next_send_can_use(guest: Any) -> None:
    p = guest({"rules": [
        {"when": {"tool_messages": 0}, "reply": {"tool_calls": [call("echo", {"k": 1})]}},
        {"when": {"tool_messages": 1}, "reply": {"status": 500}, "times": 1},
    ], "default": {"content": "second time lucky"}})
    fd = session(p)
    assert send(p, fd, abi.SEND_AUTO_TOOL_CALL)["error"]["code"] == "upstream_http_error"
    again = send(p, fd, abi.SEND_AUTO_TOOL_CALL)
    assert again["choices"][0]["message"]["content"] == "second time lucky"
    # The retried request replays a valid conversation.
    assert_valid_transcript(p.server.requests[-1].body["messages"])


def test_a_reply_of_millions_of_objects_is_refused_not_built() -> None:
    """32 MiB of `[{},{},...]` parsed into ~870 MB of dicts per run; it is
    now an upstream_bad_json error, with the host's memory untouched."""
    bomb = '{"choices":[' + "{}," * (10 << 20) + "{}]}"
    with ScriptedServer({"default": {"body_text": bomb}}) as server:
        backend = OpenAIBackend(base_url=server.base_url, api_key_env="",
                                retry=RetryPolicy(max_retries=0))
        try:
            result = backend.complete(CompletionRequest(
                model="m", messages=[{"role": "user", "content": "hi"}]))
        finally:
            backend.close()
    assert result.error is not None and result.error.code == "upstream_bad_json"
    assert "more than 250000 arrays and objects, not parsed" in result.error.message
