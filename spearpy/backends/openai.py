"""The OpenAI-compatible chat-completions backend: OpenAI itself and every server
that speaks its wire format (vLLM, llama.cpp, Ollama /v1, Mistral, ...).

The differences between those servers live in quirk profiles
(`spearpy.backends.quirks`), not here.
"""

from __future__ import annotations

import httpx

from spearpy.backends.base import CompletionRequest
from spearpy.backends.httpbackend import (
    MAX_RESPONSE_BYTES,
    HTTPBackend,
    TransportWrapper,
    error_details,
)
from spearpy.backends.quirks import QuirkProfile
from spearpy.backends.retry import RetryPolicy
from spearpy.chat.protocol import JSONDict

__all__ = ["MAX_RESPONSE_BYTES", "OpenAIBackend", "error_details"]


class OpenAIBackend(HTTPBackend):
    kind = "openai"
    path = "/chat/completions"

    def __init__(
        self,
        *,
        name: str = "openai",
        base_url: str,
        api_key_env: str = "OPENAI_API_KEY",
        default_model: str | None = None,
        request_timeout: float = 120.0,
        retry: RetryPolicy | None = None,
        client: httpx.Client | None = None,
        max_connections: int = 64,
        quirks: QuirkProfile | str | None = None,
        wrap_transport: TransportWrapper | None = None,
    ) -> None:
        super().__init__(
            name=name, base_url=base_url, api_key_env=api_key_env, default_model=default_model,
            request_timeout=request_timeout, retry=retry, client=client,
            max_connections=max_connections, quirks=quirks, wrap_transport=wrap_transport,
        )  # fmt: skip

    def build_body(self, request: CompletionRequest) -> JSONDict:
        body: JSONDict = {"model": request.model, "messages": request.messages}
        if request.tools:
            body["tools"] = request.tools
        for key, value in request.params.items():
            body.setdefault(key, value)
        return body

    def encode(self, request: CompletionRequest) -> JSONDict:
        return self.build_body(request)
