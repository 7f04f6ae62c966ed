"""SPEAR's `stub` backend: an offline model that answers without any network.

It answers every completion, as SPEAR's stub does, with the text `stub chat
completion: <the last user message>` (`stub chat completion` when there is
no user message), finish_reason `stop`, and never asks for a tool. The
answer is deterministic: the same history gives the same body (its id is a
digest of the history, `created` is 0), so a run against it prints the same
every time and a recording of it replays. Usage counts words, not tokens.

Nothing here imports or builds an HTTP client: the stub opens no socket, so
it is what a machine without a network (or a test of everything but the
model) uses. For a scripted offline model that calls tools, see `scripted`.
"""

from __future__ import annotations

import hashlib
import time
from typing import Any, ClassVar

from spearpy import _json
from spearpy.backends.base import CompletionRequest
from spearpy.chat.protocol import CompletionResult, JSONDict, UpstreamError

PREFIX = "stub chat completion"


class StubBackend:
    kind: ClassVar[str] = "stub"

    def __init__(self, *, name: str = "stub", default_model: str | None = None) -> None:
        self.name = name
        self.default_model = default_model or "stub"

    def complete(self, request: CompletionRequest) -> CompletionResult:
        model = request.model or self.default_model
        if request.cancel is not None and request.cancel.is_set():
            return CompletionResult(self.name, model, error=UpstreamError(
                "cancelled", "the run was cancelled before the request was sent"))
        started = time.monotonic()
        body = stub_completion(request.messages, model)
        if request.stream and request.on_delta is not None:
            request.on_delta(body["choices"][0]["message"]["content"])
        return CompletionResult(self.name, model, body=body,
                                latency_ms=(time.monotonic() - started) * 1000.0)

    def describe(self) -> dict[str, Any]:
        """What a cassette needs to rebuild this backend for replay."""
        return {"kind": self.kind, "model": self.default_model}

    def close(self) -> None:
        """Nothing to release: the stub holds no connection."""


def stub_completion(messages: list[JSONDict], model: str) -> JSONDict:
    """The stub's chat.completion for a history."""
    last_user = next((_text(m.get("content")) for m in reversed(messages)
                      if isinstance(m, dict) and m.get("role") == "user"), "")
    content = f"{PREFIX}: {last_user}" if last_user else PREFIX
    digest = hashlib.sha256(_json.compact_bytes(messages)).hexdigest()
    prompt = sum(len(_text(m.get("content")).split()) for m in messages if isinstance(m, dict))
    completion = len(content.split())
    return {"id": f"chatcmpl-stub-{digest[:24]}", "object": "chat.completion", "created": 0,
            "model": model,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": content},
                         "finish_reason": "stop"}],
            "usage": {"prompt_tokens": prompt, "completion_tokens": completion,
                      "total_tokens": prompt + completion}}


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p["text"] for p in content
                       if isinstance(p, dict) and isinstance(p.get("text"), str))
    return ""
