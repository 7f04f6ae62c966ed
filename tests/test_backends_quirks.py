"""Quirk profiles, each against the loopback server behaving like its server.

Every profile is shown to matter: the same request through the same dialect
without the profile fails or goes a different way.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from spearpy import abi
from spearpy.backends.base import CompletionRequest
from spearpy.backends.openai import OpenAIBackend
from spearpy.backends.quirks import PROFILES, nine_char_id, quirk_profile, rewrite_ids_nine
from spearpy.errors import ConfigError
from tests.probe import Probe, tool_schema, wat_module
from tests.test_backends_kit import (
    MULTI_SCRIPT,
    MULTI_WASM,
    dialect_server,
    hosts,
    tool_calls,
    write_config,
)

__all__ = ["dialect_server", "hosts"]

TOOLS = [tool_schema("alpha"), tool_schema("beta")]
CHOICE_SCRIPT = [
    {"when": {"has_tools": False}, "reply": {"content": "no tools offered"}},
    {"when": {"tool_messages": 0}, "reply": {"tool_calls": [{"name": "alpha", "arguments": {}}]}},
    {"reply": {"content": "done"}},
]


def backend(server: Any, quirks: str) -> OpenAIBackend:
    return OpenAIBackend(base_url=server.base_url, api_key_env="", quirks=quirks,
                         retry=None, request_timeout=30)


def ask(b: OpenAIBackend, messages: list[dict[str, Any]] | None = None,
        **params: Any) -> Any:
    request = CompletionRequest(model="m", messages=messages or [{"role": "user", "content": "go"}],
                                tools=TOOLS, params=params)
    try:
        return b.complete(request)
    finally:
        b.close()


# ---- profiles as data ----------------------------------------------------------------


def test_unknown_profile_is_a_config_error_naming_the_known_ones() -> None:
    with pytest.raises(ConfigError, match="ollama, llamacpp, vllm, mistral"):
        quirk_profile("olama")
    assert quirk_profile(None).name == quirk_profile("openai").name == "none"
    assert quirk_profile("llama.cpp") is PROFILES["llamacpp"]


def test_nine_char_ids_are_stable_distinct_and_leave_valid_ids_alone() -> None:
    assert nine_char_id("abcDEF123") == "abcDEF123"
    one = nine_char_id("chatcmpl-tool-0123456789abcdef")
    assert re.fullmatch(r"[A-Za-z0-9]{9}", one)
    assert one == nine_char_id("chatcmpl-tool-0123456789abcdef")
    assert one != nine_char_id("chatcmpl-tool-0123456789abcdee")


def test_prepare_never_edits_the_session_history() -> None:
    history = [{"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_x", "function": {"name": "alpha", "arguments": {"a": 1}}}]},
        {"role": "tool", "tool_call_id": "call_x", "content": "1"}]
    frozen = json.dumps(history)
    for profile in PROFILES.values():
        body = {"model": "m", "messages": history, "tools": TOOLS, "tool_choice": "none"}
        profile.prepare(body)
    assert json.dumps(history) == frozen
    out = rewrite_ids_nine({"messages": history})["messages"]
    assert out[0]["tool_calls"][0]["id"] == out[1]["tool_call_id"] != "call_x"


# ---- Ollama ------------------------------------------------------------------------


def test_ollama_tool_choice_none_is_emulated_by_sending_no_tools(dialect_server: Any) -> None:
    server = dialect_server(CHOICE_SCRIPT, "ollama")
    # Without the profile the server ignores tool_choice and the model calls a tool anyway.
    ignored = ask(backend(server, "none"), tool_choice="none")
    assert ignored.body["choices"][0]["message"]["tool_calls"]
    result = ask(backend(server, "ollama"), tool_choice="none")
    assert result.body["choices"][0]["message"]["content"] == "no tools offered"
    sent = server.requests[-1].body
    assert "tools" not in sent and "tool_choice" not in sent


def test_ollama_named_tool_choice_sends_only_that_tool(dialect_server: Any) -> None:
    server = dialect_server(CHOICE_SCRIPT, "ollama")
    ask(backend(server, "ollama"), tool_choice={"type": "function", "function": {"name": "beta"}})
    sent = server.requests[-1].body
    assert [t["function"]["name"] for t in sent["tools"]] == ["beta"]
    assert "tool_choice" not in sent


def test_ollama_object_arguments_come_back_as_json_strings(dialect_server: Any) -> None:
    server = dialect_server([{"reply": {"tool_calls": [
        {"name": "alpha", "arguments": {"q": "x", "n": 2}}]}}], "ollama")
    raw = ask(backend(server, "none")).body["choices"][0]["message"]["tool_calls"][0]
    assert raw["function"]["arguments"] == {"q": "x", "n": 2}  # what Ollama sends
    fixed = ask(backend(server, "ollama")).body["choices"][0]["message"]["tool_calls"][0]
    assert fixed["function"]["arguments"] == '{"q":"x","n":2}'
    assert re.fullmatch(r"call_[a-z0-9]{8}", fixed["id"])


# ---- llama.cpp ---------------------------------------------------------------------


BAD_HISTORY = [
    {"role": "user", "content": "go"},
    {"role": "assistant", "content": None,
     "tool_calls": [{"id": "c1", "function": {"name": "alpha", "arguments": {"a": 1}}}]},
    {"role": "tool", "tool_call_id": "c1", "content": "ok"},
]


def test_llamacpp_strict_history_is_satisfied_by_the_profile(dialect_server: Any) -> None:
    server = dialect_server([{"reply": {"content": "fine"}}], "llamacpp")
    refused = ask(backend(server, "none"), BAD_HISTORY)
    assert refused.error.status == 400 and "Missing tool call type" in refused.error.message
    result = ask(backend(server, "llamacpp"), BAD_HISTORY)
    assert result.error is None
    call = server.requests[-1].body["messages"][1]["tool_calls"][0]
    assert call["type"] == "function" and call["function"]["arguments"] == '{"a":1}'


def test_llamacpp_profile_asks_for_parallel_calls_unless_the_guest_decided(
        dialect_server: Any) -> None:
    two = [{"reply": {"tool_calls": [{"name": "alpha"}, {"name": "beta"}]}}]
    server = dialect_server(two, "llamacpp")
    one = ask(backend(server, "none")).body["choices"][0]["message"]["tool_calls"]
    assert len(one) == 1  # llama-server's default
    both = ask(backend(server, "llamacpp")).body["choices"][0]["message"]["tool_calls"]
    assert len(both) == 2 and server.requests[-1].body["parallel_tool_calls"] is True
    kept = ask(backend(server, "llamacpp"), parallel_tool_calls=False)
    assert len(kept.body["choices"][0]["message"]["tool_calls"]) == 1


def test_llamacpp_without_the_profile_changes_what_the_agent_does(
        tmp_path: Path, dialect_server: Any, hosts: Any) -> None:
    server = dialect_server(MULTI_SCRIPT, "llamacpp")
    config = write_config(tmp_path / "c.toml", {"l": {"base_url": server.base_url,
                                                      "model": "m", "api_key_env": ""}})
    result = hosts(config_file=config, backend="l").run(MULTI_WASM)
    # The two calls of round 3 arrive one per turn and the script loses track.
    assert [name for name, _ in tool_calls(result)][:3] == ["add", "mul", "add"]
    assert result.stdout is not None and b"tool upper(DONE)" not in result.stdout
    assert result.exit_code != 0


# ---- vLLM --------------------------------------------------------------------------


def test_vllm_ids_break_a_mistral_model_without_the_profile(
        tmp_path: Path, dialect_server: Any, hosts: Any) -> None:
    server = dialect_server(MULTI_SCRIPT, "vllm")
    config = write_config(tmp_path / "c.toml", {"v": {"base_url": server.base_url,
                                                      "model": "m", "api_key_env": ""}})
    result = hosts(config_file=config, backend="v").run(MULTI_WASM)
    assert result.stdout is not None
    assert b"Tool call id was chatcmpl-tool-" in result.stdout  # vLLM rejects its own ids
    assert result.exit_code == 2  # the sample's "error body" exit


def test_vllm_without_auto_tool_choice_explains_the_server_flags(dialect_server: Any) -> None:
    server = dialect_server(CHOICE_SCRIPT, "vllm", auto_tool_choice=False)
    plain = ask(backend(server, "none"))
    assert plain.error.status == 400 and "restart" not in plain.error.message
    result = ask(backend(server, "vllm"))
    assert result.error.code == "upstream_http_error" and result.error.status == 400
    assert "--enable-auto-tool-choice" in result.error.message
    assert "restart it with `--enable-auto-tool-choice --tool-call-parser" in result.error.message
    assert ask(backend(server, "vllm"), tool_choice="none").error is None


# ---- Mistral -------------------------------------------------------------------------


def test_mistral_accepts_a_history_started_on_another_backend_only_with_the_profile(
        tmp_path: Path, dialect_server: Any, hosts: Any) -> None:
    first = dialect_server([{"when": {"tool_messages": 0},
                             "reply": {"tool_calls": [{"name": "alpha", "arguments": {}}]}},
                            {"reply": {"content": "first done"}}])
    mistral = dialect_server([{"reply": {"content": "mistral answered"}}], "mistral")
    config = write_config(tmp_path / "c.toml", {
        "first": {"base_url": first.base_url, "model": "m", "api_key_env": ""},
        "bare": {"base_url": mistral.base_url, "model": "m", "api_key_env": ""},
        "mis": {"base_url": mistral.base_url, "model": "m", "api_key_env": "",
                "quirks": "mistral"}}, default="first")
    host = hosts(config_file=config)
    p = Probe(host, wat_module("probe.wat"))
    try:
        fd = p.hc("cchat_create")
        p.write_msg(fd, "user", "go")
        assert p.write_fn(fd, 0, tool_schema("alpha")) == 0
        assert "first done" in json.dumps(p.recv_json(p.hc("cchat_send", fd,
                                                             abi.SEND_AUTO_TOOL_CALL)))
        p.write_msg(fd, "user", "and now?")
        assert p.set_param(fd, "backend", "bare") == 0
        refused = p.recv_json(p.hc("cchat_send", fd, 0))
        assert "Tool call id was call_0_0 but must be a-z, A-Z, 0-9" in \
            refused["error"]["message"]
        assert p.set_param(fd, "backend", "mis") == 0
        body = p.recv_json(p.hc("cchat_send", fd, 0))
        assert body["choices"][0]["message"]["content"] == "mistral answered"
        assert body["_spear"]["backend"] == "mis"
    finally:
        p.close()
