"""Replay: serve a run's upstream exchanges from a cassette, in order.

The replayed backend is the recorded one (same dialect, quirks, name, model
and retry count), rebuilt from the cassette, with a transport that answers
from the recording instead of the network. Every request must equal the next
recorded one (method, URL, JSON body); the first that does not stops the
replay: that request and every later one fail with an error body whose code
is `replay_mismatch` and whose message names the first difference. Nothing is
ever sent upstream and no API key is read.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from typing import Any

import httpx

from spearpy import _json
from spearpy.backends.anthropic import AnthropicBackend
from spearpy.backends.cassette import decode_body, first_difference, load, redact_url
from spearpy.backends.httpbackend import MAX_RESPONSE_BYTES, HTTPBackend, TransportRefusal
from spearpy.backends.ollama import OllamaBackend
from spearpy.backends.openai import OpenAIBackend
from spearpy.backends.stub import StubBackend
from spearpy.retry import RetryPolicy

REPLAY_MISMATCH = "replay_mismatch"
log = logging.getLogger("spearpy.replay")


class ReplayCursor:
    """The position in one cassette, shared by every backend replaying from it."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = str(path)
        self.data = load(path)
        self.exchanges: list[dict[str, Any]] = self.data["exchanges"]
        self._lock = threading.Lock()
        self._next = 0
        self.mismatch: str | None = None  # set once, at the first divergence

    @property
    def served(self) -> int:
        with self._lock:
            return self._next

    def remaining(self) -> int:
        with self._lock:
            return len(self.exchanges) - self._next

    def take(self, backend: str | None, method: str, url: str, body: Any) -> dict[str, Any]:
        """The recorded exchange answering this request, or TransportRefusal."""
        with self._lock:
            if self.mismatch is not None:
                raise TransportRefusal(REPLAY_MISMATCH, f"replay stopped earlier: {self.mismatch}")
            index = self._next
            problem = self._compare(index, backend, method, url, body)
            if problem is not None:
                self.mismatch = problem
                log.error("spearpy replay: %s", problem)
                raise TransportRefusal(REPLAY_MISMATCH, problem)
            self._next += 1
            return self.exchanges[index]

    def _compare(self, index: int, backend: str | None, method: str, url: str,
                 body: Any) -> str | None:
        where = f"replay of {self.path!r}: request {index + 1}"
        if index >= len(self.exchanges):
            return (f"{where} goes beyond the recording, which holds "
                    f"{len(self.exchanges)} exchanges")
        recorded = self.exchanges[index]
        if backend is not None and recorded["backend"] != backend:
            return (f"{where} went to backend {backend!r}; the recording has "
                    f"{recorded['backend']!r}")
        request = recorded["request"]
        for key, got in (("method", method), ("url", url)):
            if request.get(key) != got:
                return f"{where} diverges at {key}: recorded {request.get(key)!r}, got {got!r}"
        difference = first_difference(request.get("body"), body, "body")
        if difference is not None:
            return f"{where} diverges from the recording at {difference}"
        return None


class ReplayTransport(httpx.BaseTransport):
    """Answers from a cassette. `backend` None accepts exchanges of any backend."""

    def __init__(self, cursor: ReplayCursor, backend: str | None) -> None:
        self._cursor = cursor
        self._backend = backend

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        raw = request.read()
        try:
            body: Any = _json.loads(raw)
        except (UnicodeDecodeError, json.JSONDecodeError):
            body = raw.decode("utf-8", "replace")
        url, _ = redact_url(str(request.url))
        exchange = self._cursor.take(self._backend, request.method, url, body)
        error = exchange.get("error")
        if isinstance(error, dict):
            kind = getattr(httpx, str(error.get("type")), None)
            if not (isinstance(kind, type) and issubclass(kind, httpx.TransportError)):
                kind = httpx.TransportError
            raise kind(str(error.get("message", "")), request=request)
        recorded = exchange["response"]
        if "body_omitted" in recorded:
            content = b" " * (MAX_RESPONSE_BYTES + 1)
        else:
            content = decode_body(recorded)
        return httpx.Response(int(recorded["status"]), headers=recorded.get("headers", {}),
                              content=content, request=request)


def replay_backend(cursor: ReplayCursor, recorded_name: str, name: str | None = None,
                   *, strict_backend: bool = True,
                   wrap: Any = None) -> HTTPBackend | StubBackend:
    """The backend `recorded_name` of the cassette, answering from it.

    `wrap` (an httpx transport wrapper) lets a replay be recorded again.
    """
    desc = cursor.data["backends"][recorded_name]
    if desc.get("kind") == "stub":  # it sent nothing, and answers again as it did
        return StubBackend(name=name or recorded_name, default_model=desc.get("model") or None)
    transport = ReplayTransport(cursor, recorded_name if strict_backend else None)

    def wrap_transport(_inner: httpx.BaseTransport) -> httpx.BaseTransport:
        return wrap(transport) if wrap is not None else transport

    common: dict[str, Any] = {
        "name": name or recorded_name, "base_url": str(desc.get("base_url", "")),
        "api_key_env": "",  # a replay never needs, reads or sends a key
        "default_model": desc.get("model") or None,
        "request_timeout": float(desc.get("request_timeout", 120.0)),
        "retry": RetryPolicy(max_retries=int(desc.get("max_retries", 0)), initial_delay=0.0,
                             max_delay=0.0, honour_server_delay=False),
        "quirks": str(desc.get("quirks", "none")), "wrap_transport": wrap_transport,
    }  # fmt: skip
    if desc.get("kind") == "anthropic":
        return AnthropicBackend(**common, max_tokens=int(desc.get("max_tokens", 4096)),
                                anthropic_version=str(desc.get("anthropic_version",
                                                               "2023-06-01")))
    if desc.get("kind") == "ollama":
        return OllamaBackend(**common)
    return OpenAIBackend(**common)
