"""The Anthropic Messages backend: the mapping both ways, and the wire against
the loopback server speaking (and validating) the Messages API."""

from __future__ import annotations

from typing import Any

import pytest

from spearpy import abi
from spearpy.backends.anthropic import (
    AnthropicBackend,
    from_anthropic_message,
    to_anthropic_messages,
    tool_use_id,
)
from spearpy.backends.base import CompletionRequest
from spearpy.backends.httpbackend import DecodeError
from spearpy.chat.session import tool_error_content
from spearpy.retry import RetryPolicy
from tests.probe import Probe, tool_schema, wat_module
from tests.test_backends_kit import dialect_server, hosts, write_config

__all__ = ["dialect_server", "hosts"]


def call(cid: str, name: str, args: str) -> dict[str, Any]:
    return {"id": cid, "type": "function", "function": {"name": name, "arguments": args}}


HISTORY = [
    {"role": "system", "content": "be brief"},
    {"role": "developer", "content": "use tools"},
    {"role": "user", "content": "sum 1 and 2, then shout"},
    {"role": "assistant", "content": "on it",
     "tool_calls": [call("call_1", "add", '{"a":1,"b":2}'), call("bad:id", "shout", "not json")]},
    {"role": "tool", "tool_call_id": "call_1", "content": '{"sum":3}'},
    {"role": "tool", "tool_call_id": "bad:id",
     "content": tool_error_content("invalid_arguments", "arguments are not valid JSON")},
    {"role": "user", "content": "well?"},
]


def test_history_maps_to_messages_api_turns() -> None:
    system, turns = to_anthropic_messages(HISTORY)
    assert system == "be brief\n\nuse tools"
    assert [t["role"] for t in turns] == ["user", "assistant", "user"]
    assistant = turns[1]["content"]
    assert assistant[0] == {"type": "text", "text": "on it"}
    assert assistant[1] == {"type": "tool_use", "id": "call_1", "name": "add",
                            "input": {"a": 1, "b": 2}}
    assert assistant[2]["input"] == {}  # unparseable arguments still make a valid block
    odd_id = assistant[2]["id"]
    assert odd_id == tool_use_id("bad:id") and ":" not in odd_id
    results = turns[2]["content"]
    assert [b["type"] for b in results] == ["tool_result", "tool_result", "text"]
    assert results[0] == {"type": "tool_result", "tool_use_id": "call_1", "content": '{"sum":3}'}
    assert results[1]["tool_use_id"] == odd_id and results[1]["is_error"] is True
    assert results[2] == {"type": "text", "text": "well?"}


def test_tool_results_open_the_user_turn_even_after_a_user_message() -> None:
    _, turns = to_anthropic_messages([
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": None, "tool_calls": [call("c1", "t", "{}")]},
        {"role": "user", "content": "also this"},
        {"role": "tool", "tool_call_id": "c1", "content": "done"},
    ])
    assert [b["type"] for b in turns[2]["content"]] == ["tool_result", "text"]


def test_response_maps_to_an_openai_completion() -> None:
    body = {"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-x",
            "content": [{"type": "thinking", "thinking": "hmm"},
                        {"type": "text", "text": "Let me add."},
                        {"type": "tool_use", "id": "toolu_1", "name": "add",
                         "input": {"a": 1, "b": 2}}],
            "stop_reason": "tool_use",
            "usage": {"input_tokens": 10, "cache_read_input_tokens": 5,
                      "cache_creation_input_tokens": 2, "output_tokens": 7}}
    out = from_anthropic_message(body)
    message = out["choices"][0]["message"]
    assert message == {"role": "assistant", "content": "Let me add.",
                       "tool_calls": [call("toolu_1", "add", '{"a":1,"b":2}')]}
    assert out["choices"][0]["finish_reason"] == "tool_calls"
    assert out["usage"] == {"prompt_tokens": 17, "completion_tokens": 7, "total_tokens": 24,
                            "prompt_tokens_details": {"cached_tokens": 5}}
    ended = from_anthropic_message({**body, "content": [], "stop_reason": "max_tokens"})
    assert ended["choices"][0]["message"]["content"] == ""
    assert ended["choices"][0]["finish_reason"] == "length"
    with pytest.raises(DecodeError):
        from_anthropic_message({"type": "error", "error": {"message": "x"}})


@pytest.mark.parametrize(("params", "expected"), [
    ({}, None),
    ({"tool_choice": "required"}, {"type": "any"}),
    ({"tool_choice": "none"}, {"type": "none"}),
    ({"tool_choice": {"type": "function", "function": {"name": "add"}}},
     {"type": "tool", "name": "add"}),
    ({"parallel_tool_calls": False}, {"type": "auto", "disable_parallel_tool_use": True}),
])
def test_tool_choice_mapping(params: dict[str, Any], expected: Any) -> None:
    b = AnthropicBackend(base_url="http://127.0.0.1:9/v1", api_key_env="")
    body = b.wire_body(CompletionRequest("m", [{"role": "user", "content": "x"}],
                                         [tool_schema("add")], params))
    b.close()
    assert body.get("tool_choice") == expected
    assert "parallel_tool_calls" not in body


def test_parameters_are_mapped_or_dropped() -> None:
    b = AnthropicBackend(base_url="http://127.0.0.1:9/v1", api_key_env="", max_tokens=99)
    request = CompletionRequest("m", [{"role": "user", "content": "x"}], None, {
        "stop": "END", "seed": 1, "response_format": {"type": "json_object"}, "top_k": 5,
        "temperature": 0.5})
    body = b.wire_body(request)
    assert body["max_tokens"] == 99
    assert body["stop_sequences"] == ["END"] and body["top_k"] == 5
    assert body["temperature"] == 0.5
    assert not {"seed", "response_format", "stop"} & set(body)
    with_max = b.wire_body(CompletionRequest("m", request.messages, None,
                                             {"max_completion_tokens": 12}))
    assert with_max["max_tokens"] == 12 and "max_completion_tokens" not in with_max
    b.close()


# ---- on the wire ------------------------------------------------------------------


def test_a_failing_tool_reaches_the_api_as_is_error(dialect_server: Any, hosts: Any,
                                                    tmp_path: Any,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    server = dialect_server([
        {"when": {"tool_messages": 0},
         "reply": {"content": "trying", "tool_calls": [{"name": "boom", "arguments": {}},
                                                       {"name": "echo", "arguments": {"x": 1}}]}},
        {"reply": {"content": "saw {{last_tool}}"}}], "anthropic", api_key="sk-ant-test")
    monkeypatch.setenv("SPEARPY_ANT_KEY", "sk-ant-test")
    config = write_config(tmp_path / "c.toml", {"claude": {
        "kind": "anthropic", "base_url": server.base_url, "model": "claude-test",
        "api_key_env": "SPEARPY_ANT_KEY"}}, default="claude")
    p = Probe(hosts(config_file=config), wat_module("probe.wat"))
    try:
        fd = p.hc("cchat_create")
        p.write_msg(fd, "system", "you are a test")
        p.write_msg(fd, "user", "go")
        assert p.write_fn(fd, 0, tool_schema("echo")) == 0
        assert p.write_fn(fd, 2, tool_schema("boom")) == 0  # table[2] traps
        body = p.recv_json(p.hc("cchat_send", fd, abi.SEND_AUTO_TOOL_CALL))
    finally:
        p.close()
    assert body["choices"][0]["message"]["content"] == 'saw {"x":1}'
    assert body["object"] == "chat.completion" and body["_spear"]["backend"] == "claude"
    assert body["_spear"]["usage"]["total_tokens"] > 0
    first, second = (r for r in server.requests)
    assert first.path == "/v1/messages"
    assert first.headers["x-api-key"] == "sk-ant-test" and "authorization" not in first.headers
    assert first.headers["anthropic-version"] == "2023-06-01"
    assert first.body["system"] == "you are a test" and first.body["max_tokens"] == 4096
    results = second.body["messages"][-1]["content"]
    assert [r["type"] for r in results] == ["tool_result", "tool_result"]
    assert results[0]["is_error"] is True and "tool_exec_failed" in results[0]["content"]
    assert "is_error" not in results[1]


def test_api_errors_carry_anthropic_messages_and_overload_is_retried(
        dialect_server: Any) -> None:
    server = dialect_server([
        {"reply": {"status": 529, "error": "Overloaded"}, "times": 1},
        {"reply": {"content": "ok"}}], "anthropic", api_key="right")
    with pytest.MonkeyPatch.context() as env:
        env.setenv("SPEARPY_ANT_KEY", "wrong")
        wrong = AnthropicBackend(base_url=server.base_url, api_key_env="SPEARPY_ANT_KEY")
        env.setenv("SPEARPY_ANT_KEY", "right")
        right = AnthropicBackend(base_url=server.base_url, api_key_env="SPEARPY_ANT_KEY",
                                 retry=RetryPolicy(max_retries=1, initial_delay=0.0))
    request = CompletionRequest("m", [{"role": "user", "content": "hi"}])
    refused = wrong.complete(request)
    assert refused.error is not None and refused.error.status == 401
    assert "invalid x-api-key" in refused.error.message
    result = right.complete(request)
    assert result.error is None and result.body is not None
    assert result.body["choices"][0]["message"]["content"] == "ok"
    assert len(server.requests) == 3  # the 401, the 529, the retry
    wrong.close()
    right.close()
