"""A send without a model uses the server's only model, when /models lists
exactly one (llama.cpp and many local servers); otherwise the guest gets
no_model with how to choose one."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from spearpy.host import Host
from spearpy.testing import ScriptedServer

C_CHAT = Path(__file__).resolve().parents[1] / "wasm-samples" / "c_chat.wasm"


def _run(models: list[str]) -> tuple[Any, list[Any]]:
    script = {"default": {"content": "answered by {{model}}"}, "models": models}
    with ScriptedServer(script) as server, \
            Host(cache_dir=None, base_url=server.base_url, api_key_env="", max_retries=0) as host:
        result = host.run(C_CHAT)
        return result, list(server.requests)


def test_the_only_model_of_a_server_is_used() -> None:
    result, requests = _run(["qwen2.5-7b-instruct"])
    assert b"answered by qwen2.5-7b-instruct" in (result.stdout or b"")
    asked = [r for r in requests if r.path.endswith("/chat/completions")]
    assert [r.body["model"] for r in asked] == ["qwen2.5-7b-instruct"]


def test_with_several_models_the_guest_is_told_how_to_choose() -> None:
    result, requests = _run(["a", "b"])
    assert b"no_model" in (result.stdout or b"")
    assert b"SPEARPY_MODEL" in (result.stdout or b"")
    assert not any(r.path.endswith("/chat/completions") for r in requests)


def test_an_absurd_model_id_is_no_answer() -> None:
    result, requests = _run(["m" * 5000])
    assert b"no_model" in (result.stdout or b"")
    assert not any(r.path.endswith("/chat/completions") for r in requests)
