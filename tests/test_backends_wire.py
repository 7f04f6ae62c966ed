"""The backends' lean path to the upstream (spearpy/backends/wire.py), against
a real HTTP server on 127.0.0.1: the headers the httpx Client sent are still
sent, compressed answers are still decoded, cookies are not sent back, a
caller's own client is used with whatever it does, and a pool of one
connection serves request after request."""

from __future__ import annotations

import gzip
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest

from spearpy.backends.base import CompletionRequest
from spearpy.backends.openai import OpenAIBackend

REPLY = {"id": "r", "object": "chat.completion", "model": "m", "choices": [
    {"index": 0, "message": {"role": "assistant", "content": "hello ü"},
     "finish_reason": "stop"}]}


class _Recorder(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.seen: list[dict[str, str]] = []
        self.bodies: list[bytes] = []
        self.gzip = False


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Recorder

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        self.server.seen.append({k.lower(): v for k, v in self.headers.items()})
        self.server.bodies.append(body)
        data = json.dumps(REPLY).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Set-Cookie", "session=abc; Path=/")
        if self.server.gzip:
            data = gzip.compress(data)
            self.send_header("Content-Encoding", "gzip")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def server() -> Iterator[_Recorder]:
    recorder = _Recorder()
    thread = threading.Thread(target=recorder.serve_forever, daemon=True)
    thread.start()
    yield recorder
    recorder.shutdown()
    recorder.server_close()


def _url(server: _Recorder) -> str:
    return f"http://127.0.0.1:{server.server_address[1]}/v1"


def _ask(backend: OpenAIBackend) -> Any:
    result = backend.complete(CompletionRequest(
        model="m", messages=[{"role": "user", "content": "hi"}]))
    assert result.error is None, result.error
    return result.body


def test_headers_are_the_clients_defaults_under_the_backends(
        server: _Recorder, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WIRE_TEST_KEY", "sk-wire-test-key")
    backend = OpenAIBackend(base_url=_url(server), api_key_env="WIRE_TEST_KEY")
    try:
        _ask(backend)
    finally:
        backend.close()
    seen = server.seen[0]
    assert seen["authorization"] == "Bearer sk-wire-test-key"
    assert seen["content-type"] == "application/json"
    assert seen["accept"] == "application/json"  # the backend's, not the Client's */*
    assert seen["user-agent"] == f"python-httpx/{httpx.__version__}"
    assert "gzip" in seen["accept-encoding"]
    assert seen["host"] == f"127.0.0.1:{server.server_address[1]}"
    assert json.loads(server.bodies[0])["messages"] == [{"role": "user", "content": "hi"}]


def test_a_compressed_answer_is_decoded(server: _Recorder) -> None:
    server.gzip = True
    backend = OpenAIBackend(base_url=_url(server), api_key_env="")
    try:
        body = _ask(backend)
    finally:
        backend.close()
    assert body["choices"][0]["message"]["content"] == "hello ü"


def test_cookies_are_not_sent_back_and_one_connection_serves_many_requests(
        server: _Recorder) -> None:
    # max_connections=1: a connection not handed back to the pool would make
    # the next request wait for it until it timed out.
    backend = OpenAIBackend(base_url=_url(server), api_key_env="", max_connections=1,
                            request_timeout=5.0)
    try:
        for _ in range(30):
            _ask(backend)
    finally:
        backend.close()
    assert len(server.seen) == 30
    assert all("cookie" not in seen for seen in server.seen)


def test_a_callers_client_is_used_with_what_it_does(server: _Recorder) -> None:
    sent: list[httpx.Request] = []
    client = httpx.Client(headers={"X-Caller": "yes"}, event_hooks={"request": [sent.append]},
                          trust_env=False)
    backend = OpenAIBackend(base_url=_url(server), api_key_env="", client=client)
    try:
        _ask(backend)
        _ask(backend)
        backend.close()  # not the backend's to close
        assert not client.is_closed
    finally:
        client.close()
    assert len(sent) == 2
    assert server.seen[0]["x-caller"] == "yes"
    assert server.seen[1]["cookie"] == "session=abc"  # the caller's client keeps cookies
