"""The OpenAI-compatible chat-completions backend: OpenAI itself and every server
that speaks its wire format (vLLM, llama.cpp, Ollama /v1, Mistral, ...).

The differences between those servers live in quirk profiles
(`spearpy.backends.quirks`), not here.
"""

from __future__ import annotations

import httpx

from spearpy import _json
from spearpy.backends.base import CompletionRequest
from spearpy.backends.bounded_get import AnswerRefused, bounded_get
from spearpy.backends.httpbackend import MAX_RESPONSE_BYTES, HTTPBackend, error_details
from spearpy.backends.sse import DeltaSink, OpenAIStream
from spearpy.chat.protocol import JSONDict
from spearpy.secret_env import OPENAI_KEY_ENV

__all__ = ["MAX_RESPONSE_BYTES", "OpenAIBackend", "error_details"]


# Asking a server which models it serves must not hold a send up for long;
# a list of models is a few KiB.
MODELS_TIMEOUT_S = 5.0
MAX_MODELS_BYTES = 1 << 20
MAX_MODEL_ID_LEN = 256


class OpenAIBackend(HTTPBackend):
    kind = "openai"
    path = "/chat/completions"
    default_key_env = OPENAI_KEY_ENV
    _sole_model: str | None = None  # "" once asked and there was no single answer

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

    def sole_model(self) -> str | None:
        """The server's only model, when /models lists exactly one (llama.cpp
        and many local servers serve one): what a send without a model uses.
        Asked once per backend; any failure means no answer, never an error."""
        if self._sole_model is None:
            self._sole_model = self._ask_sole_model() or ""
        return self._sole_model or None

    def _ask_sole_model(self) -> str | None:
        try:
            status, raw = bounded_get(self._wire.client, self.base_url.rstrip("/") + "/models",
                                      headers=self._headers, timeout=MODELS_TIMEOUT_S,
                                      max_bytes=MAX_MODELS_BYTES)
            if status != 200:
                return None
            listed = _json.loads(raw).get("data")
        except (httpx.HTTPError, AnswerRefused, ValueError, AttributeError, RecursionError):
            return None
        if not isinstance(listed, list):
            return None
        ids = {entry.get("id") for entry in listed if isinstance(entry, dict)}
        ids.discard(None)
        only = next(iter(ids)) if len(ids) == 1 else None
        # The id becomes the request's model and a log field: a server's
        # invention of a megabyte-long "id" is no answer.
        fits = isinstance(only, str) and 0 < len(only) <= MAX_MODEL_ID_LEN
        return only if fits else None

    def encode(self, request: CompletionRequest) -> JSONDict:
        return self.build_body(request)
