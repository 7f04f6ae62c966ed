"""The OpenAI-compatible chat-completions backend: OpenAI itself and every server
that speaks its wire format (vLLM, llama.cpp, Ollama /v1, Mistral, ...).

The differences between those servers live in quirk profiles
(`spearpy.backends.quirks`), not here.
"""

from __future__ import annotations

from spearpy.backends.base import CompletionRequest
from spearpy.backends.httpbackend import MAX_RESPONSE_BYTES, HTTPBackend, error_details
from spearpy.backends.streaming import DeltaSink, OpenAIStream
from spearpy.chat.protocol import JSONDict

__all__ = ["MAX_RESPONSE_BYTES", "OpenAIBackend", "error_details"]


class OpenAIBackend(HTTPBackend):
    kind = "openai"
    path = "/chat/completions"
    default_key_env = "OPENAI_API_KEY"

    def build_body(self, request: CompletionRequest) -> JSONDict:
        body: JSONDict = {"model": request.model, "messages": request.messages}
        if request.tools:
            body["tools"] = request.tools
        for key, value in request.params.items():
            body.setdefault(key, value)
        if request.stream:
            body["stream"] = True
            # The usage of a streamed reply comes only in a final chunk asked for.
            body["stream_options"] = {"include_usage": True}
        return body

    def stream_assembler(self, on_delta: DeltaSink | None) -> OpenAIStream:
        return OpenAIStream(on_delta)

    def encode(self, request: CompletionRequest) -> JSONDict:
        return self.build_body(request)
