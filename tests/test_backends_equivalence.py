"""The multi-tool sample behaves the same whichever server answers it.

Each case runs wasm-samples/c_multi_tool.wasm (three tools, four
completions, two calls in one turn) against the loopback server speaking one
dialect, through a named backend from a TOML config with the matching kind
and quirk profile. The guest must make the same tool calls and print the same
answer every time; the ids in the transcript show that each dialect really
was in play.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from tests.test_backends_kit import (
    MULTI_CALLS,
    MULTI_SCRIPT,
    MULTI_STDOUT,
    MULTI_WASM,
    call_ids,
    dialect_server,
    hosts,
    tool_calls,
    write_config,
)

__all__ = ["dialect_server", "hosts"]  # fixtures used below

# name -> (kind, server dialect, quirk profile, pattern every tool call id matches)
CASES: dict[str, tuple[str, str | None, str, str]] = {
    "openai": ("openai", None, "none", r"call_\d+_\d+"),
    "anthropic": ("anthropic", "anthropic", "none", r"toolu_[A-Za-z0-9]{24}"),
    "ollama": ("openai", "ollama", "ollama", r"call_[a-z0-9]{8}"),
    "llamacpp": ("openai", "llamacpp", "llamacpp", r"call_\d+_\d+"),
    "vllm": ("openai", "vllm", "vllm", r"chatcmpl-tool-[0-9a-f]{32}"),
    "mistral": ("openai", "mistral", "mistral", r"[A-Za-z0-9]{9}"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_multi_tool_sample_is_the_same_through_every_backend(
        case: str, tmp_path: Path, dialect_server: Any, hosts: Any,
        monkeypatch: pytest.MonkeyPatch) -> None:
    kind, dialect, quirks, id_pattern = CASES[case]
    server = dialect_server(MULTI_SCRIPT, dialect, api_key="k-" + case)
    config = write_config(tmp_path / "config.toml", {case: {
        "kind": kind, "base_url": server.base_url, "quirks": quirks, "model": "m",
        "api_key_env": "SPEARPY_TEST_KEY"}}, default=case)
    monkeypatch.setenv("SPEARPY_TEST_KEY", "k-" + case)  # each server checks its key
    result = hosts(config_file=config).run(MULTI_WASM)

    assert result.stdout is not None
    assert result.stdout.decode() == MULTI_STDOUT, result.stderr
    assert result.exit_code == 0
    assert tool_calls(result) == MULTI_CALLS
    ids = call_ids(result)
    assert len(ids) == 4 and all(re.fullmatch(id_pattern, i) for i in ids), ids
    paths = {r.path for r in server.requests}
    assert paths == {"/v1/messages" if kind == "anthropic" else "/v1/chat/completions"}
    assert len(server.requests) == 4
