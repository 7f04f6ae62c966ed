"""The upstream retry policy, on the backend itself, against a hostile server.

Attempts are counted at the transport and every backoff the backend asks for
is recorded instead of slept, so nothing here depends on timing: each
retryable and final status, insufficient_quota, --max-retries, Retry-After in
every form and out of range, jitter, connect errors, timeouts, a response
dripping forever, broken, huge and too-deep bodies, and the deadline.
"""

from __future__ import annotations

import contextlib
import email.utils
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from spearpy.backends.base import CompletionRequest
from spearpy.backends.openai import OpenAIBackend
from spearpy.chat.protocol import CompletionResult
from spearpy.retry import (
    MAX_RETRY_AFTER,
    RetryPolicy,
    backoff_delay,
    retry_after_seconds,
    status_is_retryable,
)
from spearpy.testing import ScriptedServer

HANG_GUARD_S = 60.0


class _Counting(httpx.BaseTransport):
    """Counts requests that left the client, including ones that never connected."""

    def __init__(self, inner: httpx.BaseTransport) -> None:
        self.inner = inner
        self.count = 0

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        self.count += 1
        return self.inner.handle_request(request)

    def close(self) -> None:
        self.inner.close()


class _RecordingCancel(threading.Event):
    """A cancel event that records each backoff the backend waits for and
    returns at once, so policy tests neither sleep nor depend on timing."""

    def __init__(self) -> None:
        super().__init__()
        self.waits: list[float] = []

    def wait(self, timeout: float | None = None) -> bool:
        self.waits.append(float(timeout or 0.0))
        return False


class Attempts:
    def __init__(self, base_url: str, max_retries: int = 2, request_timeout: float = 30.0,
                 initial_delay: float = 0.5) -> None:
        self.transport: _Counting | None = None

        def wrap(inner: httpx.BaseTransport) -> httpx.BaseTransport:
            self.transport = _Counting(inner)
            return self.transport

        self.backend = OpenAIBackend(
            base_url=base_url, api_key_env="", request_timeout=request_timeout,
            retry=RetryPolicy(max_retries=max_retries, initial_delay=initial_delay),
            wrap_transport=wrap)
        self.cancel = _RecordingCancel()

    def complete(self, deadline: float | None = None) -> CompletionResult:
        request = CompletionRequest(model="m", messages=[{"role": "user", "content": "hi"}],
                                    deadline=deadline, cancel=self.cancel)
        return self.backend.complete(request)

    @property
    def count(self) -> int:
        assert self.transport is not None
        return self.transport.count

    def close(self) -> None:
        self.backend.close()


@pytest.fixture
def attempts() -> Iterator[Any]:
    made: list[Attempts] = []

    def make(server_or_url: ScriptedServer | str, **kwargs: Any) -> Attempts:
        url = server_or_url if isinstance(server_or_url, str) else server_or_url.base_url
        a = Attempts(url, **kwargs)
        made.append(a)
        return a

    yield make
    for a in made:
        a.close()


def _error(status: int, message: str = "scripted says no", **extra: Any) -> dict[str, Any]:
    return {"default": {"status": status, "error": {"message": message, **extra}}}


@pytest.mark.parametrize("status", [408, 409, 429, 500, 502, 503, 504])
def test_retryable_statuses_are_retried_with_growing_jittered_backoff(
        scripted: Any, attempts: Any, status: int) -> None:
    a = attempts(scripted(_error(status)))
    result = a.complete()
    assert a.count == 3  # max_retries 2
    assert result.error is not None and result.error.code == "upstream_http_error"
    assert result.error.status == status and "scripted says no" in result.error.message
    first, second = a.cancel.waits
    assert 0.375 <= first <= 0.5 and 0.75 <= second <= 1.0  # 0.5 s doubling, -25 % jitter


@pytest.mark.parametrize("status", [400, 401, 403, 404, 422])
def test_client_errors_fail_at_once_with_the_upstream_message(scripted: Any, attempts: Any,
                                                               status: int) -> None:
    a = attempts(scripted(_error(status, "your request is wrong because X")))
    result = a.complete()
    assert a.count == 1 and a.cancel.waits == []
    assert result.error is not None and result.error.status == status
    assert "your request is wrong because X" in result.error.message


def test_insufficient_quota_is_final(scripted: Any, attempts: Any) -> None:
    a = attempts(scripted(_error(429, "You exceeded your current quota",
                                 type="insufficient_quota", code="insufficient_quota")))
    result = a.complete()
    assert a.count == 1
    assert result.error is not None and "exceeded your current quota" in result.error.message


@pytest.mark.parametrize("retries", [0, 1, 5])
def test_max_retries_bounds_the_attempts(scripted: Any, attempts: Any, retries: int) -> None:
    a = attempts(scripted(_error(503)), max_retries=retries, initial_delay=0.001)
    a.complete()
    assert a.count == retries + 1
    assert len(a.cancel.waits) == retries
    assert all(w <= 8.0 for w in a.cancel.waits)  # the backoff cap


def test_recovery_after_transient_failures(scripted: Any, attempts: Any) -> None:
    a = attempts(scripted({"rules": [{"reply": {"status": 503}, "times": 2}],
                           "default": {"content": "finally"}}))
    result = a.complete()
    assert a.count == 3 and result.error is None
    assert result.body is not None
    assert result.body["choices"][0]["message"]["content"] == "finally"


@pytest.mark.parametrize(("headers", "expected"), [
    ({"Retry-After": "7"}, 7.0),
    ({"retry-after-ms": "250"}, 0.25),
    ({"retry-after-ms": "250", "Retry-After": "9"}, 0.25),  # the ms header wins
], ids=["seconds", "ms", "ms-wins"])
def test_retry_after_is_honoured(scripted: Any, attempts: Any, headers: dict[str, str],
                                 expected: float) -> None:
    a = attempts(scripted({"rules": [{"reply": {"status": 429, "headers": headers},
                                      "times": 1}], "default": {"content": "ok"}}))
    result = a.complete()
    assert result.error is None and a.count == 2
    assert a.cancel.waits == [pytest.approx(expected)]


@pytest.mark.parametrize("value", [str(int(MAX_RETRY_AFTER) + 1), "-3", "soon", ""])
def test_retry_after_out_of_range_falls_back_to_backoff(scripted: Any, attempts: Any,
                                                        value: str) -> None:
    a = attempts(scripted({"rules": [{"reply": {"status": 429,
                                                "headers": {"Retry-After": value}},
                                      "times": 1}], "default": {"content": "ok"}}))
    assert a.complete().error is None
    assert len(a.cancel.waits) == 1 and a.cancel.waits[0] <= 0.5


def test_retry_after_as_an_http_date() -> None:
    when = email.utils.formatdate(time.time() + 30, usegmt=True)
    delay = retry_after_seconds({"Retry-After": when})
    assert delay is not None and 25 <= delay <= 30


@given(st.dictionaries(st.sampled_from(["Retry-After", "retry-after-ms", "RETRY-AFTER"]),
                       st.one_of(st.text(max_size=40),
                                 st.from_regex(r"\A[A-Z][a-z]{2}, \d{1,2} [A-Z][a-z]{2} "
                                               r"\d{1,5} \d\d:\d\d:\d\d GMT\Z"))))
def test_any_retry_after_header_is_a_sane_delay_or_ignored(headers: dict[str, str]) -> None:
    value = retry_after_seconds(headers)
    assert value is None or 0 <= value <= MAX_RETRY_AFTER


def test_backoff_is_exponential_capped_and_jittered() -> None:
    policy = RetryPolicy()
    for n in range(1, 10):
        base = min(0.5 * 2 ** (n - 1), 8.0)
        samples = {backoff_delay(policy, n, None) for _ in range(50)}
        assert all(0.75 * base <= s <= base for s in samples)
        assert len(samples) > 1  # jitter
    assert backoff_delay(policy, 3, 4.5) == 4.5
    assert status_is_retryable(500, None) and status_is_retryable(599, None)
    assert not status_is_retryable(429, "insufficient_quota")
    assert not any(status_is_retryable(s, None) for s in (400, 401, 403, 404, 422))


@pytest.mark.parametrize(("reply", "code", "retried"), [
    ({"fault": "reset"}, "upstream_protocol_error", True),
    ({"fault": "truncate", "content": "cut short in the middle"}, "upstream_protocol_error",
     True),
    ({"fault": "garbage"}, "upstream_bad_json", False),
    ({"body_text": "<html>502 Bad Gateway</html>", "status": 502}, "upstream_http_error", True),
    ({"raw": {"id": "x", "object": "chat.completion"}}, "upstream_bad_response", False),
    ({"raw": {"choices": [{"message": "not an object"}]}}, "upstream_bad_response", False),
    ({"body_text": "[1, 2, 3]"}, "upstream_bad_json", False),
    ({"body_text": '{"choices":' + "[" * 100_000 + "]" * 100_000 + "}"}, "upstream_bad_json",
     False),
], ids=["reset", "truncate", "garbage", "html-502", "no-choices", "message-not-object",
        "json-array", "nested-too-deep"])
def test_broken_bodies_are_errors_not_answers(scripted: Any, attempts: Any,
                                              reply: dict[str, Any], code: str,
                                              retried: bool) -> None:
    a = attempts(scripted({"default": reply}), initial_delay=0.001)
    result = a.complete()
    if code == "upstream_bad_response":
        # The backend passes a JSON object through; the loop rejects it.
        assert a.count == 1
        return
    assert result.error is not None and result.error.code == code, result
    assert a.count == (3 if retried else 1)


def test_connect_errors_are_retried(attempts: Any) -> None:
    a = attempts("http://127.0.0.1:9/v1", initial_delay=0.001)
    result = a.complete()
    assert result.error is not None and result.error.code == "upstream_unreachable"
    assert a.count == 3


def test_timeouts_are_retried(scripted: Any, attempts: Any) -> None:
    a = attempts(scripted({"default": {"content": "slow", "delay_ms": 5000}}),
                 request_timeout=0.2, initial_delay=0.001)
    result = a.complete()
    assert result.error is not None and result.error.code == "upstream_timeout"
    assert a.count == 3


def test_huge_bodies_are_refused(scripted: Any, attempts: Any) -> None:
    from spearpy.backends.openai import MAX_RESPONSE_BYTES

    a = attempts(scripted({"default": {"body_text": "x" * (MAX_RESPONSE_BYTES + 1024)}}))
    result = a.complete()
    assert result.error is not None and result.error.code == "upstream_response_too_large"
    assert a.count == 1


@pytest.fixture
def drip_server() -> Iterator[str]:
    """An upstream that sends its headers, then one body byte every 50 ms for
    ever: each read is quick, the response never ends."""
    listener = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def drip(conn: socket.socket) -> None:
        with conn, contextlib.suppress(OSError):
            conn.recv(1 << 16)
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                         b"Content-Length: 1000000\r\n\r\n{")
            while not stop.wait(0.05):
                conn.sendall(b" ")

    def accept() -> None:
        with contextlib.suppress(OSError):
            while True:
                conn, _ = listener.accept()
                threading.Thread(target=drip, args=(conn,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    yield f"http://127.0.0.1:{listener.getsockname()[1]}/v1"
    stop.set()
    listener.close()


def test_a_dripping_response_times_out_as_a_whole(drip_server: str, attempts: Any) -> None:
    a = attempts(drip_server, request_timeout=0.3, initial_delay=0.001)
    box: list[CompletionResult] = []
    worker = threading.Thread(target=lambda: box.append(a.complete()), daemon=True)
    worker.start()
    worker.join(HANG_GUARD_S)
    assert not worker.is_alive(), "a dripping upstream held the request"
    assert box[0].error is not None and box[0].error.code == "upstream_timeout"
    assert a.count == 3  # a timeout, so retried


def test_a_dripping_response_ends_at_the_run_deadline(drip_server: str, make_host: Any) -> None:
    from pathlib import Path

    wasm = Path(__file__).resolve().parents[1] / "wasm-samples" / "c_chat.wasm"
    host = make_host(base_url=drip_server, request_timeout=600, max_retries=3)
    handle = host.start(wasm, limits={"timeout": 1})
    result = handle.result(timeout=HANG_GUARD_S)
    assert (result.outcome, result.exit_code) == ("timeout", 124)


def test_backoff_never_outlives_the_deadline(scripted: Any, attempts: Any) -> None:
    a = attempts(scripted({"default": {"status": 503, "headers": {"Retry-After": "30"}}}),
                 max_retries=5)
    result = a.complete(deadline=time.monotonic() + 0.3)
    assert a.cancel.waits and all(w <= 0.3 for w in a.cancel.waits)
    assert result.error is not None


def test_retries_stop_at_the_deadline_in_real_time(scripted: Any) -> None:
    server = scripted({"default": {"status": 503, "headers": {"Retry-After": "30"}}})
    backend = OpenAIBackend(base_url=server.base_url, api_key_env="",
                            retry=RetryPolicy(max_retries=5))
    box: list[CompletionResult] = []
    request = CompletionRequest(model="m", messages=[{"role": "user", "content": "hi"}],
                                deadline=time.monotonic() + 1.0, cancel=threading.Event())
    worker = threading.Thread(target=lambda: box.append(backend.complete(request)), daemon=True)
    worker.start()
    worker.join(HANG_GUARD_S)  # 5 retries x 30 s would be 150 s
    backend.close()
    assert not worker.is_alive()
    assert len(server.requests) == 1
    assert box[0].error is not None and box[0].error.code == "deadline_exceeded"


