"""Ollama discovery (SPEAR's `[spearlet.llm.discovery.ollama]`) against a real
loopback server speaking Ollama's `/api/ps` and `/api/tags`
(tests/ollama_server.py): which models, filtered and bounded how, named how,
and what an unreachable, remote or hostile Ollama gets (a warning and no
models, never a failed host). Also the sibling: an OpenAI server's `/models`
list is bounded the same way.
"""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from typing import Any

import pytest
from pydantic import ValidationError

from spearpy.backends.base import CompletionRequest
from spearpy.backends.factory import build_from_spec
from spearpy.backends.ollama_discovery import (
    MAX_ANSWER_BYTES,
    DiscoveredBackend,
    OllamaDiscovery,
    discover,
)
from spearpy.backends.openai import MAX_MODELS_BYTES, OpenAIBackend
from spearpy.backends.specs import HostDefaults
from tests.ollama_server import OllamaServer, Reply

SERVING = ["llama3:latest", "qwen2.5:7b"]
INSTALLED = [*SERVING, "mistral:7b", "phi3:mini"]


@pytest.fixture
def ollama() -> Iterator[OllamaServer]:
    with OllamaServer(installed=INSTALLED, serving=SERVING) as server:
        yield server


def _settings(server: OllamaServer, **keys: Any) -> OllamaDiscovery:
    return OllamaDiscovery(enabled=True, base_url=server.base_url, **keys)


def _names(found: list[DiscoveredBackend]) -> list[str]:
    return [d.name for d in found]


def test_serving_scope_imports_the_running_models(ollama: OllamaServer) -> None:
    found = discover(_settings(ollama))
    assert _names(found) == ["ollama/llama3_latest", "ollama/qwen2.5_7b"]
    assert [r.path for r in ollama.requests] == ["/api/ps"]
    first = found[0]
    assert (first.spec.kind, first.spec.model, first.spec.base_url, first.spec.key_env()) == \
        ("ollama", "llama3:latest", ollama.base_url, "")
    assert (first.weight, first.priority, first.ops, first.features, first.transports) == \
        (100, 0, ("chat_completions",), (), ("http",))


def test_installed_scope_imports_every_installed_model(ollama: OllamaServer) -> None:
    found = discover(_settings(ollama, scope="installed", name_prefix="o-", default_weight=5))
    assert _names(found) == ["o-llama3_latest", "o-mistral_7b", "o-phi3_mini", "o-qwen2.5_7b"]
    assert [r.path for r in ollama.requests] == ["/api/tags"]
    assert {d.weight for d in found} == {5}


def test_a_discovered_backend_answers_with_its_model(ollama: OllamaServer) -> None:
    ollama.chat = lambda request: Reply(content="I am " + request["model"])
    found = discover(_settings(ollama))[1]
    backend = build_from_spec(found.name, found.spec, HostDefaults(max_retries=0))
    try:
        result = backend.complete(CompletionRequest(
            model=backend.default_model, messages=[{"role": "user", "content": "who?"}]))
    finally:
        backend.close()
    assert result.body is not None
    assert result.body["choices"][0]["message"]["content"] == "I am qwen2.5:7b"


def test_allow_then_deny_then_max_models(ollama: OllamaServer) -> None:
    installed = {"scope": "installed"}
    assert _names(discover(_settings(ollama, **installed, allow_models=["phi3:mini", "x"]))) \
        == ["ollama/phi3_mini"]
    assert _names(discover(_settings(ollama, **installed,
                                     deny_models=["llama3:latest", "phi3:mini"]))) \
        == ["ollama/mistral_7b", "ollama/qwen2.5_7b"]
    assert _names(discover(_settings(ollama, **installed, max_models=2))) \
        == ["ollama/llama3_latest", "ollama/mistral_7b"]
    assert discover(_settings(ollama, **installed, max_models=0)) == []


def test_name_conflicts_skip_or_overwrite(ollama: OllamaServer) -> None:
    taken = {"ollama/llama3_latest", "other"}
    assert _names(discover(_settings(ollama), taken)) == ["ollama/qwen2.5_7b"]
    assert _names(discover(_settings(ollama, name_conflict="overwrite"), taken)) == \
        ["ollama/llama3_latest", "ollama/qwen2.5_7b"]


def test_disabled_discovery_asks_nothing(ollama: OllamaServer) -> None:
    assert discover(OllamaDiscovery(base_url=ollama.base_url)) == []
    assert ollama.requests == []


@pytest.mark.parametrize("url", ["http://10.0.0.5:11434", "http://ollama.example.com",
                                 "http://169.254.169.254/latest", "http://[fd00::1]:11434"])
def test_a_remote_base_url_is_refused_unless_allowed(url: str) -> None:
    with pytest.raises(ValidationError, match=r"not a loopback address.*allow_remote = true"):
        OllamaDiscovery(enabled=True, base_url=url)
    assert OllamaDiscovery(enabled=True, base_url=url, allow_remote=True).base_url == url


@pytest.mark.parametrize("url", ["ftp://127.0.0.1/", "http://user:pw@127.0.0.1:11434",
                                 "127.0.0.1:11434"])
def test_a_base_url_that_is_no_plain_http_url_is_refused(url: str) -> None:
    with pytest.raises(ValidationError, match="base_url"):
        OllamaDiscovery(enabled=True, base_url=url, allow_remote=True)


@pytest.mark.parametrize("url", ["http://localhost:11434", "http://127.0.0.2:1",
                                 "http://[::1]:11434"])
def test_loopback_base_urls_are_accepted(url: str) -> None:
    assert OllamaDiscovery(enabled=True, base_url=url).base_url == url


# ---- a missing or hostile Ollama: a warning and no models ---------------------------------


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _warned(caplog: pytest.LogCaptureFixture, *words: str) -> bool:
    return any(all(w in r.getMessage() for w in words) for r in caplog.records
               if r.name == "spearpy.ollama" and r.levelno == logging.WARNING)


def test_an_unreachable_ollama_is_a_warning_naming_it(caplog: pytest.LogCaptureFixture) -> None:
    url = f"http://127.0.0.1:{_closed_port()}"
    with caplog.at_level(logging.WARNING, "spearpy.ollama"):
        assert discover(OllamaDiscovery(enabled=True, base_url=url)) == []
    assert _warned(caplog, url + "/api/ps", "ConnectError")


def _raw(body: bytes, status: int = 200) -> Any:
    def send(handler: BaseHTTPRequestHandler) -> None:
        handler.send_response(status)
        handler.send_header("Content-Type", "application/json")
        handler.end_headers()
        handler.wfile.write(body)
    return send


@pytest.mark.parametrize(("body", "status", "why"), [
    (b'{"models": [{"name": "a"', 200, "not JSON"),
    (b'{"models": "all of them"}', 200, 'no "models" list'),
    (b'["llama3"]', 200, 'no "models" list'),
    (b'{"error": "boom"}', 500, "HTTP 500"),
])
def test_a_garbage_answer_is_a_warning_and_no_models(
        ollama: OllamaServer, caplog: pytest.LogCaptureFixture, body: bytes, status: int,
        why: str) -> None:
    ollama.hostile["/api/ps"] = _raw(body, status)
    with caplog.at_level(logging.WARNING, "spearpy.ollama"):
        assert discover(_settings(ollama)) == []
    assert _warned(caplog, ollama.base_url, why)


def test_odd_model_entries_are_left_out(ollama: OllamaServer) -> None:
    ollama.serving = ["ok:1", "x" * 300, "two words", "", "tab\there"]
    ollama.hostile["/api/ps"] = _raw(
        ollama.models(ollama.serving)[:-2] + b', 7, {"name": 5}, {"model": "by-model"}]}')
    assert _names(discover(_settings(ollama))) == ["ollama/by-model", "ollama/ok_1"]


def _endless(sent: list[int], limit: int) -> Any:
    def send(handler: BaseHTTPRequestHandler) -> None:
        _raw(b'{"models": [')(handler)
        block = (b'{"name": "m' + b"x" * 200 + b'"},') * 300
        while sent[0] < limit:  # a client that never stops reading still ends the test
            handler.wfile.write(block)
            sent[0] += len(block)
    return send


def test_a_huge_tags_answer_is_cut_at_the_bound(
        ollama: OllamaServer, caplog: pytest.LogCaptureFixture) -> None:
    sent = [0]
    ollama.hostile["/api/tags"] = _endless(sent, 64 << 20)
    with caplog.at_level(logging.WARNING, "spearpy.ollama"):
        assert discover(_settings(ollama, scope="installed", timeout_ms=60_000)) == []
    assert _warned(caplog, "/api/tags", f"larger than {MAX_ANSWER_BYTES} bytes")
    # The client hung up near the bound (socket buffers hold a few MiB more).
    assert sent[0] < MAX_ANSWER_BYTES + (16 << 20)


def test_a_dripping_answer_is_cut_at_timeout_ms(
        ollama: OllamaServer, caplog: pytest.LogCaptureFixture) -> None:
    def drip(handler: BaseHTTPRequestHandler) -> None:
        _raw(b'{"models": [')(handler)
        for _ in range(600):  # 60 s in all: far past the 300 ms asked for
            handler.wfile.write(b" ")
            handler.wfile.flush()
            time.sleep(0.1)

    ollama.hostile["/api/ps"] = drip
    started = time.monotonic()
    with caplog.at_level(logging.WARNING, "spearpy.ollama"):
        assert discover(_settings(ollama, timeout_ms=300)) == []
    # Generous: the bound is 0.3 s; what matters is that it is not the server's 60 s.
    assert time.monotonic() - started < 20
    assert _warned(caplog, "took longer than 0.3 s")


# ---- the sibling: an OpenAI server's /models list ------------------------------------


def test_an_endless_models_list_is_cut_at_its_bound(ollama: OllamaServer) -> None:
    sent = [0]
    ollama.hostile["/v1/models"] = _endless(sent, 64 << 20)
    backend = OpenAIBackend(base_url=ollama.base_url + "/v1", api_key_env="")
    try:
        assert backend.sole_model() is None
    finally:
        backend.close()
    assert sent[0] < MAX_MODELS_BYTES + (16 << 20)
