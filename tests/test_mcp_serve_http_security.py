"""`spearpy mcp serve --http` follows the rule of every spearpy HTTP surface
(spearpy/web/guard.py), attacked as a web page or a network peer would:
real `spearpy mcp serve` processes, raw HTTP with forged headers, and the
SDK's own client for what must keep working."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import httpx2
import pytest
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client

ROOT = Path(__file__).resolve().parent.parent
MULTI = ROOT / "wasm-samples" / "c_multi_tool.wasm"
SERVE = [sys.executable, "-m", "spearpy.cli.mcp_cmd", "serve"]
TOKEN = "mcp-serve-token-3b9d0c7e51"
INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "attacker", "version": "1"}}}
MCP_HEADERS = {"Accept": "application/json, text/event-stream",
               "Content-Type": "application/json"}


def _start(*args: str, env: dict[str, str] | None = None) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen([*SERVE, str(MULTI), "--no-cache", *args], cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, **(env or {})})
    assert proc.stderr is not None
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        if not line:
            break
        found = re.search(r"on (http://\S+/mcp)", line)
        if found:
            return proc, found.group(1)
    proc.kill()
    pytest.fail(f"the server did not start: {proc.stderr.read()}")


def _stop(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        proc.kill()
    proc.wait()


@pytest.fixture(scope="module")
def open_server() -> Iterator[str]:
    """No token, on a loopback address other than 127.0.0.1 (which the SDK's
    own Host check, when it was the only one, did not cover)."""
    proc, url = _start("--http", "127.0.0.2:0")
    yield url
    _stop(proc)


@pytest.fixture(scope="module")
def token_server() -> Iterator[str]:
    proc, url = _start("--http", "127.0.0.1:0", env={"SPEARPY_MCP_TOKEN": TOKEN})
    yield url
    _stop(proc)


def _post(url: str, headers: dict[str, str] | None = None, body: Any = INIT) -> httpx.Response:
    return httpx.post(url, json=body, headers={**MCP_HEADERS, **(headers or {})}, timeout=30,
                      trust_env=False)


def _problem(reply: httpx.Response, status: int, slug: str) -> dict[str, Any]:
    assert reply.status_code == status, reply.text
    assert reply.headers["content-type"].startswith("application/problem+json")
    body: dict[str, Any] = reply.json()
    assert body["status"] == status and body["type"] == f"urn:spearpy:problem:{slug}"
    return body


async def _tools(url: str, headers: dict[str, str] | None = None) -> list[str]:
    async with httpx2.AsyncClient(headers=headers or {}, trust_env=False) as http, \
            streamable_http_client(url, http_client=http) as (read, write), \
            ClientSession(read, write) as client:
        await client.initialize()
        result = await client.call_tool("add", {"a": 2, "b": 40})
        assert not result.is_error and "42" in str(result.content[0]), result
        return [tool.name for tool in (await client.list_tools()).tools]


# ---- without a token: loopback names and pages only --------------------------------------


def test_a_rebound_host_name_is_refused_on_every_loopback_address(open_server: str) -> None:
    # A page on evil.example whose DNS now says 127.0.0.2 sends its own name as Host.
    for host in ("evil.example", "evil.example:80", "127.0.0.2.evil.example",
                 "127.0.0.2:80@evil.example", "localhost.evil.example", ""):
        reply = _post(open_server, {"Host": host})
        assert host in _problem(reply, 421, "misdirected-request")["detail"]
        assert "mcp-session-id" not in reply.headers  # no session began


def test_loopback_names_with_and_without_port_are_served(open_server: str) -> None:
    port = open_server.rsplit(":", 1)[1].split("/")[0]
    for host in (f"127.0.0.2:{port}", "127.0.0.2", "127.9.9.9", f"localhost:{port}",
                 "[::1]", f"[::1]:{port}"):
        reply = _post(open_server, {"Host": host})
        assert reply.status_code == 200, (host, reply.text)
        assert reply.headers["mcp-session-id"]
    assert anyio.run(_tools, open_server) == ["add", "mul", "upper"]


def test_a_page_on_another_site_is_refused_by_its_origin(open_server: str) -> None:
    # Fetched straight at 127.0.0.2 (no rebinding): Host is loopback, Origin is not.
    for origin in ("https://evil.example", "http://127.0.0.2.evil.example", "null",
                   "http://localhost:notaport"):
        _problem(_post(open_server, {"Origin": origin}), 403, "cross-origin")
    port = open_server.rsplit(":", 1)[1].split("/")[0]
    assert _post(open_server, {"Origin": f"http://127.0.0.2:{port}"}).status_code == 200


def test_only_json_may_be_posted(open_server: str) -> None:
    # A cross-site form or sendBeacon needs no preflight; it cannot send JSON.
    for media in ("text/plain", "application/x-www-form-urlencoded", None):
        headers = {"Accept": MCP_HEADERS["Accept"]}
        if media:
            headers["Content-Type"] = media
        reply = httpx.post(open_server, content=b'{"jsonrpc": "2.0"}', headers=headers,
                           timeout=30, trust_env=False)
        _problem(reply, 415, "unsupported-media-type")


# ---- with a token ----------------------------------------------------------------------


def test_every_request_needs_the_token(token_server: str) -> None:
    for headers in ({}, {"Authorization": "Bearer " + "x" * len(TOKEN)},
                    {"Authorization": TOKEN}, {"Authorization": f"Basic {TOKEN}"}):
        reply = _post(token_server, headers)
        _problem(reply, 401, "unauthorized")
        assert reply.headers["www-authenticate"].startswith("Bearer")
        assert TOKEN not in reply.text
    # Only the event stream of `spearpy serve` takes a token in the query.
    _problem(_post(token_server + f"?access_token={TOKEN}"), 401, "unauthorized")
    bearer = {"Authorization": f"Bearer {TOKEN}"}
    assert anyio.run(_tools, token_server, bearer) == ["add", "mul", "upper"]
    # With a token the Host is not what keeps strangers out: a proxy's name is fine.
    assert _post(token_server, {**bearer, "Host": "mcp.example.com"}).status_code == 200


def test_listening_beyond_loopback_needs_a_token() -> None:
    env = {k: v for k, v in os.environ.items() if k != "SPEARPY_MCP_TOKEN"}
    for address in ("0.0.0.0:0", "[::]:0", "192.0.2.1:0"):
        done = subprocess.run([*SERVE, str(MULTI), "--http", address], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 2 and "without a token" in done.stderr, done.stderr
    done = subprocess.run([*SERVE, str(MULTI), "--http", "127.0.0.1:0", "--token", "short"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "at least 16" in done.stderr, done.stderr


def test_a_token_lets_it_listen_on_every_address() -> None:
    proc, url = _start("--http", "0.0.0.0:0", "--token", TOKEN)
    try:
        port = url.rsplit(":", 1)[1].split("/")[0]
        loopback = f"http://127.0.0.1:{port}/mcp"
        _problem(_post(loopback), 401, "unauthorized")
        assert _post(loopback, {"Authorization": f"Bearer {TOKEN}"}).status_code == 200
    finally:
        _stop(proc)
