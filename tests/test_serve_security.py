"""`spearpy serve` against bad input and callers without the token: bearer
auth, module names that try to leave the modules directory, oversized bodies,
the loopback rule, and keys that must never appear in what it answers."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner
from uvicorn.protocols.http.h11_impl import H11Protocol

from spearpy import HostConfig
from spearpy.serve import BackgroundServer, ServeConfig, create_app
from spearpy.serve.cli import serve
from spearpy.web.guard import check_bind
from tests.test_serve_api import SAMPLES, assert_problem, modules_dir, sse_events

TOKEN = "serve-test-token-6f1c2a9e"
SECRET = "cred-5b0e1d77c3a94f2e"  # the backend's API key
KEY_ENV = "SPEARPY_SERVE_TEST_CRED"  # a name no credential pattern matches: only key_envs knows it
BODY_CAP = 4096


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BackgroundServer]:
    where = tmp_path_factory.mktemp("serve-security")
    os.environ[KEY_ENV] = SECRET
    try:
        host = HostConfig(backend=f"scripted:{SAMPLES / 'scripts' / 'multi_tool.json'}",
                          api_key_env=KEY_ENV, cache_dir=None, timeout=30)
        config = ServeConfig(modules_dir=modules_dir(where), state_dir=where / "state",
                             host=host, token=TOKEN, max_body_bytes=BODY_CAP, grace=0.5)
        with BackgroundServer(create_app(config), grace=0.5) as running:
            yield running
    finally:
        del os.environ[KEY_ENV]


@pytest.fixture
def client(server: BackgroundServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, timeout=30,
                      headers={"Authorization": f"Bearer {TOKEN}"}) as c:
        yield c


def test_every_route_but_healthz_needs_the_token(server: BackgroundServer) -> None:
    with httpx.Client(base_url=server.url, timeout=30) as anonymous:
        assert anonymous.get("/healthz").status_code == 200
        for method, path in (("GET", "/v1/runs"), ("POST", "/v1/runs"), ("GET", "/metrics"),
                             ("GET", "/readyz"), ("GET", "/v1/modules"),
                             ("GET", "/v1/openapi.json"), ("DELETE", "/v1/runs/x"),
                             ("GET", "/v1/runs/x/events"), ("GET", "/nope")):
            reply = anonymous.request(method, path)
            assert_problem(reply, 401, "unauthorized")
            assert reply.headers["www-authenticate"].startswith("Bearer")
        wrong = anonymous.get("/v1/runs", headers={"Authorization": "Bearer " + "x" * 24})
        assert "not valid" in assert_problem(wrong, 401)["detail"]
        assert_problem(anonymous.get("/v1/runs", headers={"Authorization": TOKEN}), 401)
        # The page is static code without data (a browser cannot send a header
        # when it navigates); everything it shows comes from /v1.
        assert anonymous.get("/").status_code == 200
        assert anonymous.get("/static/app.js").status_code == 200
        # EventSource cannot set headers: the event stream alone takes ?access_token=.
        assert_problem(anonymous.get("/v1/runs", params={"access_token": TOKEN}), 401)


def test_token_in_the_query_opens_the_event_stream(server: BackgroundServer,
                                                   client: httpx.Client) -> None:
    run = client.post("/v1/runs", json={"module": "c_hello", "args": ["x"],
                                        "wait": True}).json()
    with httpx.Client(base_url=server.url, timeout=30) as anonymous:
        with anonymous.stream("GET", run["urls"]["events"],
                              params={"access_token": TOKEN}) as response:
            assert response.status_code == 200
            kinds = [record["kind"] for _id, record in sse_events(response)]
        assert kinds[0] == "run_start" and kinds[-1] == "run_end"
        reply = anonymous.get(run["urls"]["events"], params={"access_token": "y" * 24})
        assert_problem(reply, 401)


def test_keys_never_appear_in_any_answer(client: httpx.Client) -> None:
    # A guest that prints the key (here, handed it as an argument by a careless
    # caller) and a request that quotes it: both come back scrubbed.
    run = client.post("/v1/runs", json={"module": "c_hello", "args": [SECRET],
                                        "env": {"LEAK": SECRET}, "wait": True}).json()
    assert run["exit_code"] == 0 and "arg: [redacted]" in run["stdout"]
    answers = [client.get(run["urls"]["self"]).text, client.get("/v1/runs").text,
               client.get(run["urls"]["events"]).text, client.get("/metrics").text,
               client.post("/v1/runs", json={"module": SECRET}).text,
               client.post("/v1/runs", json={"module": TOKEN}).text,
               client.post("/v1/runs", json={"module": "c_hello", "model": SECRET}).text]
    for text in answers:
        assert SECRET not in text and TOKEN not in text
    assert "[redacted]" in answers[0] and "[redacted]" in answers[4]


@pytest.mark.parametrize("name", [
    "../c_hello.wasm", "..", "../outside", "/etc/passwd", "sub/c_hello.wasm", ".hidden.wasm",
    "c_hello.wasm/..", "c_hello\0.wasm", "notes.txt", "escape", "escape.wasm", "",
])
def test_module_names_cannot_leave_the_modules_directory(client: httpx.Client,
                                                         name: str) -> None:
    reply = client.post("/v1/runs", json={"module": name})
    assert reply.status_code == 422, reply.text
    assert reply.json()["type"] in ("urn:spearpy:problem:bad-module-name",
                                    "urn:spearpy:problem:unknown-module",
                                    "urn:spearpy:problem:invalid-request")


def test_a_symlink_inside_the_directory_is_a_module(client: httpx.Client) -> None:
    run = client.post("/v1/runs", json={"module": "alias", "wait": True}).json()
    assert run["module"] == "alias.wasm" and run["exit_code"] == 0
    assert client.get("/v1/modules/..%2Foutside").status_code in (404, 422)


def test_bodies_over_the_cap_get_413(client: httpx.Client) -> None:
    big = {"module": "c_hello", "stdin": "x" * BODY_CAP}
    body = assert_problem(client.post("/v1/runs", json=big), 413, "body-too-large")
    assert body["max_bytes"] == BODY_CAP

    def chunks() -> Iterator[bytes]:  # no Content-Length: the cap counts what arrives
        yield b'{"module": "c_hello", "stdin": "'
        for _ in range(BODY_CAP // 512 + 1):
            yield b"y" * 512
        yield b'"}'

    reply = client.post("/v1/runs", content=chunks(),
                        headers={"content-type": "application/json"})
    assert_problem(reply, 413, "body-too-large")
    assert client.post("/v1/runs", json={"module": "c_hello", "stdin": "x" * 1000,
                                         "wait": True}).status_code == 201


def test_request_heads_are_bounded(server: BackgroundServer) -> None:
    """A client that never ends its head (one header after another, or one
    endless value) is answered 400 and cut off; the service does not buffer
    it. uvicorn's httptools parser would (docs/serve.md): the server pins h11."""
    assert issubclass(server._server.config.http_protocol_class, H11Protocol)
    pieces = 4000  # 32 MB if nothing stops it: more than loopback's socket buffers hold
    for piece in (b"X-Filler-%d: " + b"a" * 8000 + b"\r\n", b"b" * 8000):
        accepted = 0
        with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                         + (b"" if b"%d" in piece else b"X-Endless: "))
            try:
                for i in range(pieces):
                    sock.sendall(piece % i if b"%d" in piece else piece)
                    accepted += len(piece)
            except OSError:
                pass  # reset by the server: what this test wants
            try:
                answer = sock.recv(200)
            except ConnectionResetError:
                answer = b"(reset)"  # the 400 went, but the reset overtook it
        assert answer.startswith((b"HTTP/1.1 400", b"(reset)")), answer
        assert accepted < pieces * len(piece) * 3 // 4


def test_loopback_only_without_a_token(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for host in ("127.0.0.1", "::1", "[::1]", "localhost", "127.0.0.2"):
        check_bind(host, None)
    for host in ("0.0.0.0", "::", "192.168.1.10", "example.com"):
        with pytest.raises(ValueError, match="without a token"):
            check_bind(host, None)
        check_bind(host, TOKEN)
    monkeypatch.delenv("SPEARPY_SERVE_TOKEN", raising=False)
    mods = tmp_path / "mods"
    mods.mkdir()
    result = CliRunner().invoke(serve, ["--modules", str(mods), "--host", "0.0.0.0",
                                        "--state-dir", str(tmp_path / "state")])
    assert result.exit_code == 2 and "without a token" in result.output
    with pytest.raises(ValueError, match="at least 16"):
        ServeConfig(modules_dir=mods, token="short")


def test_serve_is_a_spearpy_command() -> None:
    from spearpy.cli import main

    result = CliRunner().invoke(main, ["serve", "--help"])
    assert result.exit_code == 0 and "--modules" in result.output and "--grace" in result.output
    assert "serve" in CliRunner().invoke(main, ["--help"]).output
