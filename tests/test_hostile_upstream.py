"""A hostile upstream: faults, storms, lies. Every send ends with an answer or a
structured error body, never a hang, and the session transcript stays valid.

Two layers. The retry policy is checked on the backend itself (counting
attempts at the transport, recording every backoff it asks for instead of
sleeping it); the model's lies and faults mid-conversation go through real
sends from the WAT probe guest. Both talk to `spearpy.testing.ScriptedServer`
over real loopback HTTP. `pytest -m long` runs the full fault matrix.
"""

from __future__ import annotations

import contextlib
import email.utils
import json
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from spearpy import abi
from spearpy.backends.base import CompletionRequest
from spearpy.backends.openai import OpenAIBackend
from spearpy.backends.retry import (
    MAX_RETRY_AFTER,
    RetryPolicy,
    backoff_delay,
    retry_after_seconds,
    status_is_retryable,
)
from spearpy.chat.protocol import CompletionResult
from spearpy.fdtable import FdKind
from spearpy.instance import GuestRun
from spearpy.testing import ScriptedServer
from tests.probe import Probe, tool_schema, wat_module

HANG_GUARD_S = 60.0
PROBE = wat_module("probe.wat")
ECHO = 0
TOOL_ROLES = {"system", "user", "assistant", "tool", "developer"}


def assert_valid_transcript(messages: list[dict[str, Any]], *, pending_ok: bool = False) -> None:
    """What any strict OpenAI-compatible upstream accepts: every tool_call id is
    unique in the session and answered exactly once, by tool messages right
    after its assistant message, in call order. `pending_ok`: the calls of the
    last assistant message may still be unanswered (after a plain send)."""
    seen: set[str] = set()
    i = 0
    while i < len(messages):
        message = messages[i]
        assert message.get("role") in TOOL_ROLES, message
        assert message["role"] != "tool", f"tool message {i} answers no call: {message}"
        calls = message.get("tool_calls") or []
        i += 1
        if message["role"] != "assistant" or not calls:
            continue
        ids = [c["id"] for c in calls]
        assert all(isinstance(x, str) and x for x in ids), calls
        assert len(set(ids)) == len(ids) and not seen & set(ids), f"reused ids {ids}"
        seen |= set(ids)
        for call in calls:
            assert call["type"] == "function" and isinstance(call["function"]["name"], str)
            assert isinstance(call["function"]["arguments"], str)
        answered = []
        while i < len(messages) and messages[i].get("role") == "tool":
            answered.append(messages[i]["tool_call_id"])
            assert isinstance(messages[i]["content"], str)
            i += 1
        if pending_ok and i == len(messages):
            assert answered == ids[:len(answered)], (ids, answered)
        else:
            assert answered == ids, (ids, answered)


# ---- the retry policy, on the backend -------------------------------------------------


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


# ---- a hostile model inside real sends ---------------------------------------------------


@pytest.fixture(autouse=True)
def no_host_bugs(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    bugs: list[str] = []
    monkeypatch.setattr(GuestRun, "note_host_bug",
                        lambda _run, where, exc: bugs.append(f"{where}: {exc!r}"))
    yield
    assert bugs == []


def send(p: Probe, fd: int, flags: int) -> dict[str, Any]:
    """One send; its body must be an answer or a structured error."""
    rfd = p.hc("cchat_send", fd, flags)
    assert rfd >= 0, rfd
    body = p.recv_json(rfd)
    assert "_spear" in body
    if "error" in body:
        assert isinstance(body["error"]["code"], str) and body["error"]["code"]
        assert isinstance(body["error"]["message"], str)
    else:
        assert isinstance(body["choices"][0]["message"], dict)
    return body


def session(p: Probe, *, arena: bool = False, timeout_ms: int | None = None) -> int:
    fd = int(p.hc("cchat_create"))
    assert p.write_fn(fd, ECHO, tool_schema("echo")) == 0
    if arena:
        assert p.set_param(fd, "tool_arena_ptr", 200_000) == 0
        assert p.set_param(fd, "tool_arena_len", 32_768) == 0
    if timeout_ms is not None:
        assert p.set_param(fd, "timeout_ms", timeout_ms) == 0
    assert p.write_msg(fd, "user", "go") == 0
    return fd


def messages_of(p: Probe, fd: int) -> list[dict[str, Any]]:
    return list(p.run.fds.get(fd, FdKind.CHAT_SESSION).messages)


def call(name: str, arguments: Any = None, call_id: str | None = None,
         **extra: Any) -> dict[str, Any]:
    entry: dict[str, Any] = {"name": name, "arguments": {} if arguments is None else arguments,
                             **extra}
    if call_id is not None:
        entry["id"] = call_id
    return entry


@pytest.fixture
def guest(make_host: Any, scripted: Any) -> Iterator[Any]:
    """guest(script, **host_config) -> Probe talking to a scripted upstream."""
    probes: list[Probe] = []

    def make(script: Any, **config: Any) -> Probe:
        server = scripted(script)
        config.setdefault("base_url", server.base_url)
        p = Probe(make_host(**config), PROBE)
        p.server = server  # type: ignore[attr-defined]
        probes.append(p)
        return p

    yield make
    for p in probes:
        p.close()


def test_endless_tool_calls_end_at_the_iteration_limit(guest: Any) -> None:
    p = guest({"default": {"tool_calls": [call("echo", {"n": 1}), call("echo", {"n": 2})]}})
    fd = session(p)
    body = send(p, fd, abi.SEND_AUTO_TOOL_CALL)
    assert body["error"]["code"] == "tool_call_limit"
    assert body["_spear"]["iterations"] == 8
    assert_valid_transcript(messages_of(p, fd))
    # The session is still usable: a plain send after the limit goes upstream again.
    assert p.write_msg(fd, "user", "stop now") == 0
    send(p, fd, 0)
    assert_valid_transcript(messages_of(p, fd), pending_ok=True)


def test_tool_call_storm_in_one_turn_hits_the_tool_limit(guest: Any) -> None:
    storm = [call("echo", {"i": i}) for i in range(200)]
    p = guest({"rules": [{"when": {"no_tool_message": True}, "reply": {"tool_calls": storm}}],
               "default": {"content": "done"}})
    fd = session(p)
    body = send(p, fd, abi.SEND_AUTO_TOOL_CALL)
    assert body["error"]["code"] == "tool_call_limit"
    messages = messages_of(p, fd)
    assert_valid_transcript(messages)
    assert sum(1 for m in messages if m["role"] == "tool") == 200


def test_unknown_tool_names_go_back_to_the_model(guest: Any) -> None:
    p = guest({"rules": [{"when": {"no_tool_message": True},
                          "reply": {"tool_calls": [call("rm_rf"), call("../../etc/passwd"),
                                                   call("echo", {"ok": True})]}}],
               "default": {"content": "recovered"}})
    fd = session(p)
    body = send(p, fd, abi.SEND_AUTO_TOOL_CALL)
    assert body["choices"][0]["message"]["content"] == "recovered"
    tools = [m for m in messages_of(p, fd) if m["role"] == "tool"]
    assert [json.loads(t["content"]).get("error", {}).get("code") for t in tools] == [
        "unknown_tool", "unknown_tool", None]
    assert_valid_transcript(messages_of(p, fd))


def test_reused_and_missing_tool_call_ids_are_made_unique(guest: Any) -> None:
    p = guest({"rules": [
        {"when": {"tool_messages": 0},
         "reply": {"tool_calls": [call("echo", {"a": 1}, "dup"), call("echo", {"a": 2}, "dup"),
                                  call("echo", {"a": 3}, "")]}},
        {"when": {"tool_messages": 3},
         "reply": {"tool_calls": [call("echo", {"a": 4}, "dup")]}},
    ], "default": {"content": "done"}})
    fd = session(p)
    body = send(p, fd, abi.SEND_AUTO_TOOL_CALL)
    assert body["choices"][0]["message"]["content"] == "done"
    messages = messages_of(p, fd)
    assert_valid_transcript(messages)
    assert [m["content"] for m in messages if m["role"] == "tool"] == [
        '{"a":1}', '{"a":2}', '{"a":3}', '{"a":4}']


def test_malformed_tool_calls_are_normalised_or_dropped(guest: Any) -> None:
    raw = {"id": "x", "object": "chat.completion", "model": "m", "choices": [{
        "index": 0, "finish_reason": "tool_calls", "message": {
            "role": "assistant", "content": [{"type": "text", "text": "thinking"}],
            "reasoning_content": "hidden",
            "tool_calls": [
                {"function": {"name": "echo", "arguments": {"as": "object"}}},  # no id/type
                "not an object",
                {"id": "c2", "type": "function", "function": {"arguments": "{}"}},  # no name
                {"id": "c3", "type": "function", "function": {"name": "echo"}},  # no arguments
                {"id": "c4", "name": "echo", "arguments": "{not json"},  # flattened, bad JSON
            ]}}]}
    p = guest({"rules": [{"when": {"no_tool_message": True}, "reply": {"raw": raw}}],
               "default": {"content": "done"}})
    fd = session(p)
    body = send(p, fd, abi.SEND_AUTO_TOOL_CALL)
    assert body["choices"][0]["message"]["content"] == "done"
    messages = messages_of(p, fd)
    assert_valid_transcript(messages)
    tools = [m["content"] for m in messages if m["role"] == "tool"]
    assert tools[0] == '{"as":"object"}' and tools[1] == "{}"
    assert json.loads(tools[2])["error"]["code"] == "invalid_arguments"


def test_legacy_function_call_is_run(guest: Any) -> None:
    raw = {"choices": [{"message": {"role": "assistant", "content": None,
                                    "function_call": {"name": "echo",
                                                      "arguments": '{"legacy":1}'}}}]}
    p = guest({"rules": [{"when": {"no_tool_message": True}, "reply": {"raw": raw}}],
               "default": {"content": "final: {{last_tool}}"}})
    fd = session(p)
    body = send(p, fd, abi.SEND_AUTO_TOOL_CALL)
    assert body["choices"][0]["message"]["content"] == 'final: {"legacy":1}'
    assert_valid_transcript(messages_of(p, fd))


# Faults the model's server can throw at any point of a conversation.
FAULTS: dict[str, tuple[dict[str, Any], str]] = {
    "garbage": ({"fault": "garbage"}, "upstream_bad_json"),
    "storm-500": ({"status": 500}, "upstream_http_error"),
    "storm-503": ({"status": 503, "headers": {"Retry-After": "0"}}, "upstream_http_error"),
    "rate-limited": ({"status": 429, "headers": {"retry-after-ms": "10"}},
                     "upstream_http_error"),
    "reset": ({"fault": "reset"}, "upstream_protocol_error"),
    "truncate": ({"fault": "truncate", "content": "half of this goes missing"},
                 "upstream_protocol_error"),
    "slow": ({"content": "too late", "delay_ms": 5000}, "upstream_timeout"),
    "no-choices": ({"raw": {"object": "chat.completion"}}, "upstream_bad_response"),
    "html": ({"status": 502, "body_text": "<html>bad gateway</html>"}, "upstream_http_error"),
    "quota": ({"status": 429, "error": {"message": "quota", "code": "insufficient_quota"}},
              "upstream_http_error"),
    "auth": ({"status": 401, "error": "Incorrect API key provided"}, "upstream_http_error"),
}


def fault_script(fault: dict[str, Any], where: str, times: int | None) -> dict[str, Any]:
    """`where`: "first" = the first completion fails; "mid" = after a tool turn."""
    first = {"tool_calls": [call("echo", {"k": "v"})]}
    rule: dict[str, Any] = {"reply": fault}
    if times is not None:
        rule["times"] = times
    if where == "first":
        return {"rules": [rule], "default": {"content": "recovered"}}
    rule["when"] = {"tool_messages": 1}
    return {"rules": [{"when": {"tool_messages": 0}, "reply": first}, rule],
            "default": {"content": "recovered"}}


def check_fault(guest: Any, name: str, where: str, *, transient: bool, auto: bool,
                arena: bool) -> None:
    fault, code = FAULTS[name]
    p = guest(fault_script(fault, where, 1 if transient else None), max_retries=1,
              request_timeout=0.3)
    fd = session(p, arena=arena)
    handle: list[dict[str, Any]] = []
    worker = threading.Thread(target=lambda: handle.append(
        send(p, fd, abi.SEND_AUTO_TOOL_CALL if auto else 0)), daemon=True)
    worker.start()
    worker.join(HANG_GUARD_S)
    assert not worker.is_alive(), "the send hung"
    body = handle[0]
    finals = {"garbage", "no-choices", "quota", "auth"}  # not retried
    if transient and name not in finals:
        if where == "first" or auto:
            assert "error" not in body, body
    elif where == "first" or auto:
        assert body["error"]["code"] == code, body
    assert_valid_transcript(messages_of(p, fd), pending_ok=not auto)


@pytest.mark.parametrize("name", sorted(FAULTS))
@pytest.mark.parametrize("where", ["first", "mid"])
def test_faults_end_every_send(guest: Any, name: str, where: str) -> None:
    check_fault(guest, name, where, transient=False, auto=True, arena=False)


@pytest.mark.parametrize("name", ["storm-503", "reset", "slow", "truncate"])
def test_transient_faults_are_retried_away(guest: Any, name: str) -> None:
    check_fault(guest, name, "mid", transient=True, auto=True, arena=False)


@pytest.mark.long
@pytest.mark.parametrize("name", sorted(FAULTS))
@pytest.mark.parametrize("where", ["first", "mid"])
@pytest.mark.parametrize("transient", [False, True], ids=["persistent", "transient"])
@pytest.mark.parametrize("auto", [False, True], ids=["plain", "auto"])
@pytest.mark.parametrize("arena", [False, True], ids=["allocator", "arena"])
def test_full_fault_matrix(guest: Any, name: str, where: str, transient: bool, auto: bool,
                           arena: bool) -> None:
    check_fault(guest, name, where, transient=transient, auto=auto, arena=arena)


def test_a_failed_send_leaves_a_session_the_next_send_can_use(guest: Any) -> None:
    p = guest({"rules": [
        {"when": {"tool_messages": 0}, "reply": {"tool_calls": [call("echo", {"k": 1})]}},
        {"when": {"tool_messages": 1}, "reply": {"status": 500}, "times": 1},
    ], "default": {"content": "second time lucky"}})
    fd = session(p)
    assert send(p, fd, abi.SEND_AUTO_TOOL_CALL)["error"]["code"] == "upstream_http_error"
    again = send(p, fd, abi.SEND_AUTO_TOOL_CALL)
    assert again["choices"][0]["message"]["content"] == "second time lucky"
    # The retried request replays a valid conversation.
    assert_valid_transcript(p.server.requests[-1].body["messages"])
