"""The service's bounds on connections (serve/connections.py): a head that
never comes is cut off, connections past the cap are closed unanswered, and
neither bound touches a client that behaves, a long event stream included."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from spearpy import HostConfig
from spearpy.serve import BackgroundServer, ServeConfig, create_app
from spearpy.web.connections import default_max_connections
from tests.test_serve_api import modules_dir, sse_events

HEAD_TIMEOUT = 0.5
CAP = 6


def _server(where: Path, **bounds: Any) -> BackgroundServer:
    # A model that answers after 1.5 s: its run's event stream outlives the
    # head timeout three times over.
    script = where / "slow.json"
    script.write_text(json.dumps({"default": {"content": "late", "delay_ms": 1500}}))
    config = ServeConfig(modules_dir=modules_dir(where), state_dir=where / "state",
                         host=HostConfig(backend=f"scripted:{script}", cache_dir=None),
                         grace=0.5, **bounds)
    return BackgroundServer(create_app(config), grace=0.5)


@pytest.fixture(scope="module")
def quick_heads(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BackgroundServer]:
    with _server(tmp_path_factory.mktemp("heads"), head_timeout=HEAD_TIMEOUT) as running:
        yield running


def _closed_within(sock: socket.socket, seconds: float) -> float:
    """Seconds until the server closed `sock` (reading it to the end)."""
    start = time.monotonic()
    sock.settimeout(seconds)
    try:
        while sock.recv(4096):
            pass
    except ConnectionResetError:
        pass
    return time.monotonic() - start


def test_a_connection_that_sends_nothing_is_closed(quick_heads: BackgroundServer) -> None:
    with socket.create_connection(("127.0.0.1", quick_heads.port)) as sock:
        assert _closed_within(sock, 10) < 5


def _trickle_until_closed(sock: socket.socket, seconds: float) -> float:
    """Send a byte every 0.1 s; seconds until the server closed `sock`."""
    start = time.monotonic()
    sock.setblocking(False)
    while time.monotonic() - start < seconds:
        try:
            sock.send(b"X")
            if sock.recv(1) == b"":
                break
        except BlockingIOError:
            pass  # nothing to read yet: still open
        except OSError:
            break  # reset
        time.sleep(0.1)
    return time.monotonic() - start


def test_a_trickled_head_is_cut_off(quick_heads: BackgroundServer) -> None:
    with socket.create_connection(("127.0.0.1", quick_heads.port)) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\n")
        assert _trickle_until_closed(sock, 10) < 5


def test_keep_alive_requests_and_long_streams_are_untouched(quick_heads: BackgroundServer
                                                           ) -> None:
    with socket.create_connection(("127.0.0.1", quick_heads.port), timeout=10) as sock:
        for _ in range(3):  # one connection, with pauses shorter than the timeout
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            answer = b""
            while not answer.endswith(b"}"):  # {"status":"ok"}
                chunk = sock.recv(4096)
                assert chunk, "the server closed a connection that was in use"
                answer += chunk
            assert answer.startswith(b"HTTP/1.1 200")
            time.sleep(HEAD_TIMEOUT / 3)
    with httpx.Client(base_url=quick_heads.url, timeout=30) as client:
        run = client.post("/v1/runs", json={"module": "c_chat"}).json()
        start = time.monotonic()
        with client.stream("GET", f"/v1/runs/{run['id']}/events") as stream:
            kinds = [record["kind"] for _id, record in sse_events(stream)]
    assert time.monotonic() - start > 2 * HEAD_TIMEOUT
    assert kinds[-1] == "run_end"
    assert "completion_end" in kinds


def test_past_the_cap_new_connections_are_closed(tmp_path: Path) -> None:
    with _server(tmp_path, max_connections=CAP, head_timeout=30) as server:
        held = [socket.create_connection(("127.0.0.1", server.port)) for _ in range(CAP)]
        try:
            time.sleep(0.2)  # the server has taken them all
            with socket.create_connection(("127.0.0.1", server.port)) as extra:
                assert _closed_within(extra, 10) < 5
            with pytest.raises(httpx.TransportError):
                httpx.get(server.url + "/healthz", timeout=5)
        finally:
            for sock in held:
                sock.close()
        time.sleep(0.2)  # the held ones are gone: room again
        assert httpx.get(server.url + "/healthz", timeout=5).status_code == 200


def test_the_default_cap_is_half_the_descriptor_limit() -> None:
    import resource

    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    assert default_max_connections() == max(64, soft // 2)


def test_spearpy_serve_lifts_the_soft_descriptor_limit() -> None:
    # In a child with a lowered soft limit: this process's limits stay as they are.
    script = ("import resource\n"
              "from spearpy.web.connections import raise_fd_limit\n"
              "soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)\n"
              "resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))\n"
              "print(raise_fd_limit() == hard == resource.getrlimit(resource.RLIMIT_NOFILE)[0])\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=60, check=True)
    assert done.stdout.strip() == "True", done.stderr
