"""Host.use_backend: an embedder's own backend object serves guest sessions."""

from __future__ import annotations

from typing import Any

from spearpy import CompletionRequest, CompletionResult, Host
from tests.probe import Probe, wat_module


class EchoModel:
    """An in-process model: answers with the last user message."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.default_model = f"{name}-model"
        self.requests: list[CompletionRequest] = []
        self.closed = False

    def complete(self, request: CompletionRequest) -> CompletionResult:
        self.requests.append(request)
        text = f"{self.name} heard: {request.messages[-1]['content']}"
        body = {"choices": [{"index": 0, "finish_reason": "stop",
                             "message": {"role": "assistant", "content": text}}],
                "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}}
        return CompletionResult(self.name, request.model, body=body)

    def close(self) -> None:
        self.closed = True


def ask(p: Probe, text: str, backend: str | None = None) -> dict[str, Any]:
    fd = int(p.hc("cchat_create"))
    if backend is not None:
        assert p.set_param(fd, "backend", backend) == 0
    assert p.write_msg(fd, "user", text) == 0
    return p.recv_json(p.hc("cchat_send", fd, 0))


def test_default_and_named_backends_from_objects(make_host: Any) -> None:
    host: Host = make_host(model=None)
    default, named = EchoModel("default"), EchoModel("special")
    host.use_backend(default)
    host.use_backend(named, name="special")
    p = Probe(host, wat_module("probe.wat"))
    try:
        plain = ask(p, "hello")
        assert plain["choices"][0]["message"]["content"] == "default heard: hello"
        assert plain["_spear"]["backend"] == "default"
        assert default.requests[0].model == "default-model"  # its default model applies
        picked = ask(p, "psst", backend="special")
        assert picked["choices"][0]["message"]["content"] == "special heard: psst"
        unknown = ask(p, "?", backend="nope")
        assert "nope" in unknown["error"]["message"]
        assert len(default.requests) == len(named.requests) == 1
    finally:
        p.close()
    host.close()
    assert default.closed and named.closed


def test_replacing_a_backend_closes_the_old_one(make_host: Any) -> None:
    host: Host = make_host()
    first, second = EchoModel("first"), EchoModel("second")
    host.use_backend(first)
    host.use_backend(second)
    assert first.closed and not second.closed
