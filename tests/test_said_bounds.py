"""What an upstream or a service says reaches guests, logs and terminals cut
to 2000 characters with its control characters escaped (spearpy/_term.py),
as `spearpy mcp list/call` print what a server said:

- a bad upstream response's own error message (chat/normalize.py
  bad_response_reason), from a real HTTP server on 127.0.0.1 answering a
  c_chat run with a 100 kB message full of terminal escapes;
- what `spearpy stream` prints of a service that refuses it (its detail,
  a refused upgrade's body) or answers garbage (no ws_url: a clear error,
  not a traceback), from a real hostile HTTP server.

Before the bound, the guest got the whole 100 kB message and the terminal
the service's escapes.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from spearpy import Host
from spearpy.chat.normalize import UPSTREAM_MESSAGE_MAX_CHARS, bad_response_reason
from spearpy.cli.stream_cmd import SAID_MAX_CHARS
from tests.test_serve_api import SAMPLES

# Clear the screen, retitle the terminal, then a lot of text.
HOSTILE = "\x1b[2J\x1b]0;pwned\x07\u202e" + "A" * 100_000
Answer = Callable[[BaseHTTPRequestHandler], tuple[int, bytes]]


@pytest.fixture
def hostile() -> Iterator[Callable[[Answer], str]]:
    """hostile(answer) -> the base URL of a server answering every request
    with answer(request) = (status, JSON body)."""
    servers: list[ThreadingHTTPServer] = []

    def start(answer: Answer) -> str:
        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # a WebSocket client reads nothing older

            def _reply(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                status, body = answer(self)
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = _reply

            def log_message(self, *args: object) -> None:
                pass

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_port}"

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def _json(value: object) -> bytes:
    return json.dumps(value).encode()


def test_a_bad_responses_reason_carries_the_upstreams_message_bounded_and_escaped() -> None:
    reason = bad_response_reason({"error": {"message": HOSTILE}})
    assert reason.startswith("upstream returned no choices[0].message: \\x1b[2J\\x1b]0;pwned")
    assert len(reason) < UPSTREAM_MESSAGE_MAX_CHARS + 100 and reason.endswith("...")
    assert reason.isprintable()
    assert bad_response_reason({"error": {"message": "no model"}}).endswith(": no model")
    assert bad_response_reason([]) == "upstream response has no usable choices[0].message"


def test_a_guest_gets_a_hostile_upstreams_message_bounded(
        hostile: Callable[[Answer], str]) -> None:
    url = hostile(lambda _request: (200, _json({"error": {"message": HOSTILE}})))
    with Host(cache_dir=None, base_url=f"{url}/v1", model="m", api_key_env="",
              max_retries=0) as host:
        result = host.run(SAMPLES / "c_chat.wasm")
    out = (result.stdout or b"").decode()
    # c_chat prints how many bytes its answer had, then the error body.
    assert "upstream_bad_response" in out and "pwned" in out, out[:500]
    received = int(out.split("recv: ")[1].split(" bytes")[0])
    assert received < UPSTREAM_MESSAGE_MAX_CHARS + 1000, received
    assert "\x1b" not in out and "\u202e" not in out


def _stream(*args: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-c", "from spearpy.cli import main; main()", "stream", *args]
    return subprocess.run(cmd, input="hello\n", capture_output=True, text=True, timeout=60,
                          check=False)


def _check_said(proc: subprocess.CompletedProcess[str]) -> None:
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert "pwned" in proc.stderr  # what it said is shown ...
    assert len(proc.stderr) < SAID_MAX_CHARS + 200, len(proc.stderr)  # ... cut
    assert "\x1b" not in proc.stderr and "\u202e" not in proc.stderr  # ... and escaped


def test_spearpy_stream_prints_a_refusing_services_detail_bounded_and_escaped(
        hostile: Callable[[Answer], str]) -> None:
    url = hostile(lambda _request: (500, _json({"detail": HOSTILE})))
    _check_said(_stream(f"{url}/v1/runs/abc"))
    # A refused upgrade: the body of the refusal.
    _check_said(_stream(url.replace("http://", "ws://") + "/ws?token=t"))


@pytest.mark.parametrize("answer", [
    _json({"detail": HOSTILE}),  # no ws_url
    _json({"ws_url": 7, "why": HOSTILE}),
    _json({"ws_url": "file:///etc/passwd", "why": HOSTILE}),
    HOSTILE.encode(),  # not JSON
])
def test_spearpy_stream_refuses_a_session_answer_without_a_ws_url(
        hostile: Callable[[Answer], str], answer: bytes) -> None:
    url = hostile(lambda _request: (200, answer))
    proc = _stream(f"{url}/v1/runs/abc")
    _check_said(proc)
    assert "no ws:// or wss:// ws_url" in proc.stderr
