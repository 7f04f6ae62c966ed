"""`spearpy serve` under the rule of every spearpy HTTP surface
(spearpy/web/guard.py) and against input past what it reads: real uvicorn
on loopback, raw requests with forged headers, WebSocket upgrades by hand,
and hypothesis bodies that must never get a 500."""

from __future__ import annotations

import ast
import base64
import json
import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spearpy import HostConfig
from spearpy.backends.anthropic import tool_use_id
from spearpy.mcp.naming import fits_openai
from spearpy.serve import BackgroundServer, ServeConfig, create_app

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "wasm-samples"
TOKEN = "serve-hardening-token-91c4e0"
JSON = {"Content-Type": "application/json"}
SUBPROTOCOL = "spear.stream.v1"


def _service(where: Path, host: str = "127.0.0.1", token: str | None = None
             ) -> BackgroundServer:
    mods = where / "modules"
    mods.mkdir()
    for name in ("c_hello", "c_user_stream_echo"):
        shutil.copy(SAMPLES / f"{name}.wasm", mods / f"{name}.wasm")
    config = ServeConfig(modules_dir=mods, state_dir=where / "state", token=token, grace=0.5,
                         host=HostConfig(backend="scripted:" + str(
                             SAMPLES / "scripts" / "multi_tool.json"), cache_dir=None,
                             timeout=30))
    return BackgroundServer(create_app(config), host=host, grace=0.5)


@pytest.fixture(scope="module")
def open_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BackgroundServer]:
    """No token, on a loopback address other than 127.0.0.1."""
    with _service(tmp_path_factory.mktemp("open"), host="127.0.0.2") as running:
        yield running


@pytest.fixture(scope="module")
def token_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BackgroundServer]:
    with _service(tmp_path_factory.mktemp("token"), token=TOKEN) as running:
        yield running


@pytest.fixture
def client(open_server: BackgroundServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=open_server.url, timeout=30, trust_env=False) as http:
        yield http


def _problem(reply: httpx.Response, status: int, slug: str | None = None) -> dict[str, Any]:
    assert reply.status_code == status, reply.text
    assert reply.headers["content-type"].startswith("application/problem+json")
    body: dict[str, Any] = reply.json()
    if slug is not None:
        assert body["type"] == f"urn:spearpy:problem:{slug}", body
    return body


def _streaming_run(http: httpx.Client) -> str:
    """A live c_user_stream_echo run: it waits for a client session."""
    reply = http.post("/v1/runs", json={"module": "c_user_stream_echo"})
    assert reply.status_code == 201, reply.text
    run_id: str = reply.json()["id"]
    return run_id


def _upgrade(server: BackgroundServer, target: str, headers: dict[str, str]) -> str:
    """The status line a WebSocket upgrade of `target` gets, sent by hand so
    every header (Host included) is exactly what an attacker chose."""
    key = base64.b64encode(os.urandom(16)).decode()
    lines = [f"GET {target} HTTP/1.1", "Upgrade: websocket", "Connection: Upgrade",
             f"Sec-WebSocket-Key: {key}", "Sec-WebSocket-Version: 13",
             f"Sec-WebSocket-Protocol: {SUBPROTOCOL}"]
    headers = {"Host": f"{server.host}:{server.port}", **headers}
    lines += [f"{name}: {value}" for name, value in headers.items()]
    with socket.create_connection((server.host, server.port), timeout=30) as sock:
        sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
        head = b""
        while b"\r\n" not in head:
            chunk = sock.recv(4096)
            if not chunk:
                break
            head += chunk
    return head.split(b"\r\n")[0].decode("latin-1")


def _ws_target(http: httpx.Client, run_id: str) -> str:
    session = http.post(f"/api/v1/executions/{run_id}/streams/session", json={})
    assert session.status_code == 200, session.text
    url: str = session.json()["ws_url"]
    return url[url.index("/api/"):]


# ---- the Host and Origin rule, for every loopback address and the WebSocket ---------------


def test_a_service_on_another_loopback_address_answers_its_own_name(
        client: httpx.Client, open_server: BackgroundServer) -> None:
    for host in (f"127.0.0.2:{open_server.port}", "127.0.0.2", "localhost", "[::1]:80"):
        assert client.get("/v1/runs", headers={"Host": host}).status_code == 200, host
    for host in ("evil.example", "127.0.0.2.evil.example", "127.0.0.2:x", "[::1]x"):
        _problem(client.get("/v1/runs", headers={"Host": host}), 421, "misdirected-request")


def test_a_page_on_another_site_is_refused_by_its_origin(client: httpx.Client) -> None:
    _problem(client.post("/v1/runs", json={"module": "c_hello"},
                         headers={"Origin": "https://evil.example"}), 403, "cross-origin")
    assert client.get("/v1/runs", headers={"Origin": "http://localhost:8700"}).status_code == 200


def test_a_websocket_upgrade_passes_the_host_and_origin_check(
        client: httpx.Client, open_server: BackgroundServer) -> None:
    target = _ws_target(client, _streaming_run(client))
    # A rebound page, holding a valid stream token (it leaked, or the page
    # guessed nothing and relies on the check alone): no session.
    assert _upgrade(open_server, target, {"Host": "evil.example"}).split()[1] == "421"
    # A page elsewhere needs no rebinding for a WebSocket: no CORS applies.
    origin = _upgrade(open_server, target, {"Origin": "https://evil.example"})
    assert origin.split()[1] == "403"
    assert _upgrade(open_server, target, {}).split()[1] == "101"


# ---- every POST is JSON ---------------------------------------------------------------------


def test_a_cross_site_simple_post_cannot_mint_a_stream_token(client: httpx.Client) -> None:
    run_id = _streaming_run(client)
    path = f"/api/v1/executions/{run_id}/streams/session"
    # What a form, a beacon or a no-cors fetch can send without a preflight.
    for headers in ({"Content-Type": "text/plain"},
                    {"Content-Type": "application/x-www-form-urlencoded"},
                    {"Content-Type": "multipart/form-data; boundary=x"}, {}):
        reply = client.post(path, content=b"", headers=headers)
        assert "token" not in _problem(reply, 415, "unsupported-media-type")
    assert client.post(path, json={}).json()["token"]
    assert client.post(path, headers=JSON).json()["token"]  # an empty JSON POST too


# ---- the service's token on the WebSocket ------------------------------------------------------


def test_a_websocket_upgrade_needs_the_service_token(token_server: BackgroundServer) -> None:
    bearer = {"Authorization": f"Bearer {TOKEN}"}
    with httpx.Client(base_url=token_server.url, timeout=30, headers=bearer,
                      trust_env=False) as http:
        target = _ws_target(http, _streaming_run(http))
    # The stream token alone (a ws_url that leaked into a log or a history).
    assert _upgrade(token_server, target, {}).split()[1] == "401"
    wrong = {"Authorization": "Bearer " + "y" * len(TOKEN)}
    assert _upgrade(token_server, target, wrong).split()[1] == "401"
    assert _upgrade(token_server, f"{target}&access_token={'y' * 30}", {}).split()[1] == "401"
    # A browser cannot set a header on an upgrade: ?access_token= as for EventSource.
    assert _upgrade(token_server, f"{target}&access_token={TOKEN}", {}).split()[1] == "101"


def test_a_websocket_upgrade_takes_the_service_token_as_a_header(
        token_server: BackgroundServer) -> None:
    bearer = {"Authorization": f"Bearer {TOKEN}"}
    with httpx.Client(base_url=token_server.url, timeout=30, headers=bearer,
                      trust_env=False) as http:
        target = _ws_target(http, _streaming_run(http))
    assert _upgrade(token_server, target, bearer).split()[1] == "101"


def test_spearpy_stream_sends_the_service_token_on_the_upgrade(
        token_server: BackgroundServer) -> None:
    bearer = {"Authorization": f"Bearer {TOKEN}"}
    with httpx.Client(base_url=token_server.url, timeout=30, headers=bearer,
                      trust_env=False) as http:
        run_id = _streaming_run(http)
    cmd = [sys.executable, "-c", "from spearpy.cli import main; main()", "stream",
           f"{token_server.url}/v1/runs/{run_id}", "--linger", "0.3"]
    env = {**os.environ, "SPEARPY_SERVE_TOKEN": TOKEN}
    proc = subprocess.run(cmd, input=b"hello\n", capture_output=True, timeout=60, env=env,
                          check=False)
    assert proc.returncode == 0 and proc.stdout == b"hello\n", proc.stderr.decode()


# ---- input past what the service reads: a problem, never a 500 ---------------------------


def test_json_nested_past_the_parser_is_a_400(client: httpx.Client) -> None:
    for deep in (b"[" * 100_000 + b"]" * 100_000,
                 b'{"module": "c_hello", "env": ' + b'{"a":' * 50_000 + b"1" + b"}" * 50_001):
        _problem(client.post("/v1/runs", content=deep, headers=JSON), 400, "invalid-json")


def test_a_limit_past_any_number_is_a_4xx(client: httpx.Client) -> None:
    huge = b"1" + b"0" * 400
    for value in (huge, b"-" + huge, b"9223372036854775808", b"1e400", b"-1e400",
                  b"NaN", b"Infinity", b"-Infinity"):
        body = b'{"module": "c_hello", "limits": {"timeout": ' + value + b"}}"
        reply = client.post("/v1/runs", content=body, headers=JSON)
        assert reply.status_code in (400, 422), (value, reply.text)
        assert reply.headers["content-type"].startswith("application/problem+json")
    # Nothing stored that a later listing cannot show (an Infinity did that).
    assert client.get("/v1/runs").status_code == 200


def test_a_lone_surrogate_is_a_400_not_a_stored_half_run(client: httpx.Client) -> None:
    for field in (b'"args": ["\\ud800"]', b'"stdin": "a\\udfffb"', b'"env": {"\\ud800": "x"}',
                  b'"env": {"A": "\\udc00"}'):
        body = b'{"module": "c_hello", "wait": true, ' + field + b"}"
        _problem(client.post("/v1/runs", content=body, headers=JSON), 400, "invalid-json")
    # A real pair is text, and runs.
    paired = b'{"module": "c_hello", "wait": true, "args": ["\\ud83d\\ude00"]}'
    reply = client.post("/v1/runs", content=paired, headers=JSON)
    assert reply.status_code == 201 and reply.json()["exit_code"] == 0, reply.text
    assert client.get("/v1/runs").status_code == 200


def test_a_module_name_with_a_trailing_newline_is_not_a_name(client: httpx.Client) -> None:
    for name in ("c_hello.wasm\n", "c_hello\n"):
        _problem(client.post("/v1/runs", json={"module": name}), 422, "bad-module-name")
    _problem(client.get("/v1/modules/c_hello.wasm%0A"), 422, "bad-module-name")


def test_no_pattern_lets_a_trailing_newline_through() -> None:
    # `$` also matches before a final newline: a name checked with it is a
    # name plus "\n". The siblings of the module name, at their attackers:
    assert not fits_openai("add\n")  # a hostile MCP server's tool goes out aliased
    assert tool_use_id("toolu_1\n") != "toolu_1\n"  # an id Anthropic refuses is rewritten
    offenders = []
    for path in (ROOT / "spearpy").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not (isinstance(node, ast.Call) and ast.unparse(node.func) == "re.compile"
                    and node.args):
                continue
            last = node.args[0]
            while isinstance(last, ast.BinOp):  # a pattern built from pieces: its end
                last = last.right
            text = last.value if isinstance(last, ast.Constant) else ""
            text = text.decode("latin-1") if isinstance(text, bytes) else str(text)
            if text.endswith("$") and not text.endswith("\\$") and "MULTILINE" not in \
                    ast.unparse(node):
                offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert offenders == [], "end these patterns with \\Z (or use fullmatch)"


def test_the_paths_open_without_the_token_are_matched_whole(
        token_server: BackgroundServer) -> None:
    with httpx.Client(base_url=token_server.url, timeout=30, trust_env=False) as anonymous:
        assert anonymous.get("/healthz").status_code == 200
        _problem(anonymous.get("/healthz%0A"), 401, "unauthorized")


_JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                 max_size=4),
    max_leaves=20)
_NUMBERS = st.sampled_from(["1" + "0" * 400, "-1", "0", "1e999", "NaN", "-Infinity", "1e-400",
                            "9223372036854775807", "9223372036854775808", "true", "null",
                            '"5"', "0.5", "[1]", "{}"])
_FIELDS = st.sampled_from(["timeout", "tool_timeout", "fuel", "max_memory", "max_open_fds",
                           "max_log_bytes", "max_host_bytes", "bogus"])


@st.composite
def _bodies(draw: st.DrawFn) -> bytes:
    kind = draw(st.integers(0, 2))
    if kind == 0:  # any JSON at all
        return json.dumps(draw(_JSON_VALUES)).encode()
    if kind == 1:  # a request with odd limits (never a module that exists: no run starts)
        limits = ", ".join(f'"{draw(_FIELDS)}": {draw(_NUMBERS)}'
                           for _ in range(draw(st.integers(0, 3))))
        return b'{"module": "nope", "limits": {' + limits.encode() + b"}}"
    # A request whose fields hold anything.
    body: dict[str, object] = {key: draw(_JSON_VALUES) for key in draw(st.lists(st.sampled_from(
        ["module", "args", "env", "stdin", "limits", "model", "backend", "wait", "x"]),
        max_size=4, unique=True))}
    body["module"] = draw(st.sampled_from(["nope", "c_hello\n", "../x", "", 3]))
    return json.dumps(body).encode()


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(body=_bodies())
def test_no_body_gets_a_500(client: httpx.Client, body: bytes) -> None:
    reply = client.post("/v1/runs", content=body, headers=JSON)
    assert 400 <= reply.status_code < 500, (body[:200], reply.text)
    assert reply.headers["content-type"].startswith("application/problem+json")


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(value=st.text(max_size=30) | _NUMBERS, name=st.sampled_from(
    ["limit", "before", "status", "last_event_id"]))
def test_no_query_gets_a_500(client: httpx.Client, value: str, name: str) -> None:
    path = "/v1/runs/nope/events" if name == "last_event_id" else "/v1/runs"
    reply = client.get(path, params={name: value})
    assert reply.status_code < 500, (name, value, reply.text)
