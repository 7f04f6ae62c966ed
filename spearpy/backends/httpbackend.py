"""What every HTTP backend shares: one connection pool (wire.py), retries, limits, errors as values.

A dialect (OpenAI chat completions, Anthropic Messages) subclasses
`HTTPBackend` and supplies three pure steps: `encode` (CompletionRequest ->
wire JSON), `auth_headers`, and `decode` (wire JSON -> an OpenAI-shaped chat
completion). A quirk profile adjusts the wire body on the way out and the
answer on the way back. Record and replay plug in below all of this, as an
httpx transport (`wrap_transport`), so the same code runs live, recorded and
replayed.

Every failure becomes a CompletionResult with an UpstreamError: a guest gets
an error body, never a host exception. The API key is read from the
environment once, sent only in the auth headers, and never stored anywhere a
log, transcript, cassette or error message could pick it up.
"""

from __future__ import annotations

import abc
import os
import time
from dataclasses import dataclass
from typing import Any, ClassVar

import httpx
import tenacity

from spearpy import _json
from spearpy.backends.base import CompletionRequest
from spearpy.backends.quirks import QuirkProfile, quirk_profile
from spearpy.backends.sse import (
    DeltaGuard,
    DeltaSink,
    Framer,
    SSEDecoder,
    SseError,
    StreamAssembler,
    StreamReader,
)
from spearpy.backends.wire import TransportWrapper, Wire, WireResponse
from spearpy.chat.history import History
from spearpy.chat.protocol import CompletionResult, JSONDict, UpstreamError
from spearpy.errors import SpearpyError
from spearpy.observe.scrub import SecretScrubber
from spearpy.retry import (
    RetryPolicy,
    backoff_delay,
    retry_after_seconds,
    status_is_retryable,
)

# A chat completion is a few KiB; 32 MiB is far past any honest answer and
# stops a hostile upstream from filling the host's memory.
MAX_RESPONSE_BYTES = 32 << 20
UPSTREAM_BAD_RESPONSE = "upstream_bad_response"

__all__ = ["MAX_RESPONSE_BYTES", "DecodeError", "HTTPBackend", "StreamAssembler",
           "TransportRefusal", "TransportWrapper", "error_details"]


class TransportRefusal(SpearpyError):
    """Raised by a transport that will not carry a request (replay divergence):
    the backend fails the request with `code` at once, without retrying."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class DecodeError(SpearpyError):
    """A 2xx body the dialect cannot turn into a chat completion."""


@dataclass(slots=True)
class _Attempt:
    result: CompletionResult
    retryable: bool
    server_delay: float | None = None


class _OutOfTime(tenacity.stop.stop_base):
    """Stop retrying once the run is cancelled or its deadline has passed."""

    def __init__(self, request: CompletionRequest) -> None:
        self._request = request

    def __call__(self, _state: tenacity.RetryCallState) -> bool:
        request = self._request
        if request.cancel is not None and request.cancel.is_set():
            return True
        return request.deadline is not None and time.monotonic() >= request.deadline


class HTTPBackend(abc.ABC):
    kind: ClassVar[str] = "http"
    path: ClassVar[str] = "/chat/completions"
    # Where a dialect's key lives unless the configuration says otherwise.
    default_key_env: ClassVar[str] = ""
    # The content type of a streamed reply; a reply of another type is read whole.
    stream_media_type: ClassVar[str] = "text/event-stream"

    def __init__(
        self,
        *,
        name: str | None = None,
        base_url: str,
        api_key_env: str | None = None,
        default_model: str | None = None,
        request_timeout: float = 120.0,
        retry: RetryPolicy | None = None,
        client: httpx.Client | None = None,
        max_connections: int = 64,
        quirks: QuirkProfile | str | None = None,
        wrap_transport: TransportWrapper | None = None,
    ) -> None:
        self.name = name or self.kind
        if api_key_env is None:
            api_key_env = self.default_key_env
        self.default_model = default_model or ""
        self.base_url = base_url
        self.api_key_env = api_key_env
        self.quirks = quirk_profile(quirks) if not isinstance(quirks, QuirkProfile) else quirks
        self._url = base_url.rstrip("/") + self.path
        self._timeout = request_timeout
        self._retry = retry or RetryPolicy()
        key = os.environ.get(api_key_env, "") if api_key_env else ""
        self._headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if key:
            self._headers.update(self.auth_headers(key))
        self._wire = Wire(self._url, self._headers, client=client,
                          max_connections=max_connections, wrap_transport=wrap_transport)
        # An upstream (or a proxy in front of it) that echoes the key in a
        # body or an error would hand it to the guest, in any JSON spelling.
        self._scrubber = SecretScrubber([key] if key else [])

    # ---- what a dialect supplies -------------------------------------------

    def auth_headers(self, key: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {key}"}

    @abc.abstractmethod
    def encode(self, request: CompletionRequest) -> JSONDict:
        """The dialect's request body for an OpenAI-shaped request."""

    def decode(self, request: CompletionRequest, body: JSONDict) -> JSONDict:
        """The OpenAI-shaped chat completion for a 2xx body (DecodeError if none)."""
        return body

    def stream_assembler(self, on_delta: DeltaSink | None) -> StreamAssembler | None:
        """What turns this dialect's stream events into the body `decode` takes;
        None: the dialect cannot stream, and `stream` is not asked for."""
        return None

    def stream_framer(self) -> Framer:
        """What splits this dialect's streamed body into events."""
        return SSEDecoder()

    def describe(self) -> dict[str, Any]:
        """What a cassette needs to rebuild this backend for replay (no secrets)."""
        return {
            "kind": self.kind, "base_url": self.base_url, "model": self.default_model,
            "quirks": self.quirks.name, "max_retries": self._retry.max_retries,
            "request_timeout": self._timeout,
        }  # fmt: skip

    # ---- the request cycle -------------------------------------------------

    def wire_body(self, request: CompletionRequest) -> JSONDict:
        """The JSON actually sent: the dialect's encoding after the quirk profile."""
        return self.quirks.prepare(self.encode(request))

    def streams(self, request: CompletionRequest) -> bool:
        return request.stream and self.stream_assembler(None) is not None

    def close(self) -> None:
        self._wire.close()

    def payload(self, request: CompletionRequest) -> bytes:
        """The bytes sent: compact JSON of `wire_body`. The history a session
        keeps encoded is joined in as it is, unless the quirk profile rewrote it."""
        body = self.wire_body(request)
        messages = request.messages
        if isinstance(messages, History) and body.get("messages") is messages:
            return _json.compact_object_with(body, "messages", messages.encoded())
        return _json.compact_bytes(body)

    def complete(self, request: CompletionRequest) -> CompletionResult:
        started = time.monotonic()
        payload = self.payload(request)
        final = self._attempt(request, payload)
        if final.retryable and self._retry.max_retries > 0:
            final = self._retry_attempts(request, payload, final)
        result = final.result
        return CompletionResult(
            backend=result.backend, model=result.model, body=result.body, error=result.error,
            latency_ms=(time.monotonic() - started) * 1000.0, raw=result.raw,
        )

    def _retry_attempts(self, request: CompletionRequest, payload: bytes,
                        first: _Attempt) -> _Attempt:
        """Retries after a retryable first attempt. Kept off the common path:
        building the tenacity machinery costs more than a loopback round trip."""
        last = [first]
        replay_first = [first]

        def attempt() -> _Attempt:
            if replay_first:
                return replay_first.pop()  # already made; lets tenacity wait before retry 1
            outcome = self._attempt(request, payload)
            last.append(outcome)
            return outcome

        def wait(state: tenacity.RetryCallState) -> float:
            previous = last[-1]
            delay = backoff_delay(self._retry, state.attempt_number, previous.server_delay)
            if request.deadline is not None:
                delay = min(delay, max(0.0, request.deadline - time.monotonic()))
            return delay

        def sleep(seconds: float) -> None:
            # A cancelled run must not sit out a backoff (Retry-After may say 60 s).
            if request.cancel is not None:
                request.cancel.wait(seconds)
            else:
                time.sleep(seconds)

        retrying = tenacity.Retrying(
            stop=tenacity.stop_after_attempt(self._retry.max_retries + 1) | _OutOfTime(request),
            wait=wait,
            sleep=sleep,
            retry=tenacity.retry_if_result(lambda a: a.retryable),
            retry_error_callback=lambda state: last[-1],
            reraise=False,
        )
        final: _Attempt = retrying(attempt)
        return final

    def _timeout_for(self, request: CompletionRequest) -> float:
        timeout = self._timeout
        if request.timeout_s is not None:
            timeout = min(timeout, request.timeout_s)
        if request.deadline is not None:
            timeout = min(timeout, request.deadline - time.monotonic())
        return max(timeout, 0.001)

    def _fail(self, request: CompletionRequest, code: str, message: str,
              status: int | None = None, retryable: bool = False,
              server_delay: float | None = None) -> _Attempt:
        return _Attempt(
            CompletionResult(self.name, request.model,
                             error=UpstreamError(code, self._scrubber.text(message), status)),
            retryable, server_delay,
        )

    def _attempt(self, request: CompletionRequest, payload: bytes) -> _Attempt:
        if request.cancel is not None and request.cancel.is_set():
            return self._fail(request, "cancelled",
                              "the run was cancelled before the request was sent")
        if request.deadline is not None and time.monotonic() >= request.deadline:
            return self._fail(request, "deadline_exceeded",
                              "the run deadline passed before the request was sent")
        try:
            timeout = self._timeout_for(request)
            # httpx's timeout bounds each read, not the response: a server
            # dripping a byte at a time kept a request (and its run) alive
            # past both the request timeout and the run deadline.
            give_up = time.monotonic() + timeout
            response = self._wire.post(payload, timeout)
            try:
                raw = bytearray()
                stream = self._stream_reader(request, response)
                for chunk in response.iter_bytes():
                    raw += chunk
                    if stream is not None:
                        stream.feed(chunk)
                    if len(raw) > MAX_RESPONSE_BYTES:
                        return self._fail(request, "upstream_response_too_large",
                                          f"the upstream response exceeded {MAX_RESPONSE_BYTES} "
                                          "bytes", response.status_code)
                    if time.monotonic() > give_up:
                        return self._fail(request, "upstream_timeout",
                                          f"the upstream response took longer than {timeout:g} s",
                                          retryable=True)
                    if request.cancel is not None and request.cancel.is_set():
                        return self._fail(request, "cancelled",
                                          "the run was cancelled during the response")
                status = response.status_code
                # Only a failure reads headers (Retry-After); dict(httpx.Headers)
                # is quadratic in the header count and costs ~20 us a reply.
                headers = {} if 200 <= status < 300 else dict(response.headers.items())
            finally:
                response.close()
        except TransportRefusal as exc:
            return self._fail(request, exc.code, exc.message)
        except httpx.TimeoutException as exc:
            return self._fail(request, "upstream_timeout",
                              f"upstream request timed out ({type(exc).__name__})", retryable=True)
        except httpx.ConnectError as exc:
            return self._fail(request, "upstream_unreachable",
                              f"cannot connect to {self._url}: {_reason(exc)}", retryable=True)
        except SseError as exc:  # an error event in the middle of the stream
            return self._fail(request, UPSTREAM_BAD_RESPONSE, str(exc))
        except httpx.HTTPError as exc:
            # Reset connections and truncated bodies: nothing usable arrived.
            return self._fail(request, "upstream_protocol_error",
                              f"{type(exc).__name__}: {_reason(exc)}", retryable=True)
        if stream is not None:
            try:
                streamed = stream.finish()
            except SseError as exc:
                return self._fail(request, UPSTREAM_BAD_RESPONSE, str(exc), status)
            return self._interpret(request, status, headers, b"", streamed)
        return self._interpret(request, status, headers, self._scrubber.raw(bytes(raw)))

    def _stream_reader(self, request: CompletionRequest,
                       response: WireResponse) -> StreamReader | None:
        """A reader for a 2xx event stream we asked for; None for anything else
        (an error body, or a server that ignored `stream` and sent JSON)."""
        if not request.stream or not 200 <= response.status_code < 300:
            return None
        if not response.headers.get("content-type", "").startswith(self.stream_media_type):
            return None
        sink = request.on_delta
        guard = DeltaGuard(self._scrubber, sink) if sink is not None else None
        assembler = self.stream_assembler(guard.feed if guard is not None else None)
        if assembler is None:
            return None
        return StreamReader(self._scrubber, assembler, guard, self.stream_framer())

    def _interpret(self, request: CompletionRequest, status: int, headers: dict[str, str],
                   raw: bytes, streamed: JSONDict | None = None) -> _Attempt:
        body: Any = streamed
        parsed: Any = None
        refused = ""
        if streamed is None:
            try:
                body = parsed = _json.loads(raw)
            except _json.StructureError as exc:
                body, refused = None, f": {exc.msg}, not parsed"
            except ValueError:  # not JSON, not text, or an int too long to convert
                body = None
        if self._scrubber and (streamed is not None or b"\\\\" in raw or b"\\u" in raw
                               or b"\0" in raw):
            # Escapes the precise pass on the raw bytes may have missed (an
            # escaped backslash before an escape) decode into these strings,
            # and so does a body json.loads reads as UTF-16 or UTF-32 (NULs
            # in its first four bytes), whose text that pass never saw.
            body = self._scrubber.value(body)
        if not 200 <= status < 300:
            message, code = error_details(body, raw)
            return self._fail(
                request, "upstream_http_error",
                f"upstream answered HTTP {status}: {self.quirks.explain(status, message)}",
                status, retryable=status_is_retryable(status, code),
                server_delay=retry_after_seconds(headers),
            )
        if not isinstance(body, dict):
            return self._fail(request, "upstream_bad_json",
                              "upstream answered 200 with a body that is not a JSON object "
                              f"({len(raw)} bytes{refused})", status)
        try:
            completion = self.quirks.adapt(self.decode(request, body))
        except DecodeError as exc:
            return self._fail(request, UPSTREAM_BAD_RESPONSE, str(exc), status)
        model = completion.get("model")
        model = model if isinstance(model, str) and model else request.model
        return _Attempt(CompletionResult(self.name, model, body=completion,
                                         raw=raw if completion is parsed else None),
                        retryable=False)


def _reason(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return text.splitlines()[0][:300]


def error_details(body: Any, raw: bytes) -> tuple[str, str | None]:
    """The upstream's own error message and code, when it sent one.

    OpenAI nests {"error": {"message", "code"|"type"}}; Anthropic sends
    {"type": "error", "error": {"type", "message"}}; vLLM and llama.cpp put
    the message at the top level or use an integer code.
    """
    if isinstance(body, dict):
        err = body.get("error")
        if isinstance(err, dict):
            message = err.get("message")
            code = err.get("code") if isinstance(err.get("code"), str) else err.get("type")
            if isinstance(message, str):
                return message[:1000], code if isinstance(code, str) else None
        if isinstance(err, str):
            return err[:1000], None
        if isinstance(body.get("message"), str):
            return str(body["message"])[:1000], None
    text = raw[:300].decode("utf-8", "replace").strip()
    return (text or "(empty body)"), None
