"""Record and replay: cassettes hold every upstream exchange without secrets,
replays are byte-identical, and a diverging request fails loudly."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from spearpy.backends.cassette import first_difference, redact_url, scrub
from spearpy.errors import ConfigError
from spearpy.host import Host
from tests.probe import Probe, wat_module
from tests.test_backends_kit import (
    MULTI_SCRIPT,
    MULTI_STDOUT,
    MULTI_WASM,
    ROOT,
    dialect_server,
    hosts,
    write_config,
)

__all__ = ["dialect_server", "hosts"]

SECRET = "sk-test-DO-NOT-LEAK-0123456789"


def record_multi(hosts: Any, server: Any, cassette: Path, **config: Any) -> bytes:
    host = hosts(base_url=server.base_url, model="m", record=cassette, **config)
    result = host.run(MULTI_WASM)
    assert result.exit_code == 0, result.stdout
    assert result.stdout is not None
    return result.stdout


def test_a_recorded_run_replays_byte_identically_without_the_upstream(
        tmp_path: Path, dialect_server: Any, hosts: Any,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    server = dialect_server(MULTI_SCRIPT, api_key=SECRET)
    first, second = tmp_path / "first.json", tmp_path / "second.json"
    stdout = record_multi(hosts, server, first)
    assert stdout.decode() == MULTI_STDOUT
    server.stop()  # from here on, nothing answers on the recorded URL

    replay = hosts(backend=f"replay:{first}", record=second)
    result = replay.run(MULTI_WASM)
    assert result.exit_code == 0 and result.stdout == stdout
    assert second.read_bytes() == first.read_bytes()
    assert replay.replay_mismatch() is None

    cassette = json.loads(first.read_text())
    assert cassette["default"] == "openai"
    assert cassette["backends"]["openai"]["kind"] == "openai"
    exchanges = cassette["exchanges"]
    assert len(exchanges) == 4
    assert [len(e["request"]["body"]["messages"]) for e in exchanges] == [2, 4, 6, 9]
    assert all(e["response"]["status"] == 200 for e in exchanges)
    assert exchanges[3]["response"]["body"]["choices"][0]["message"]["content"].startswith(
        "(2 + 3) * 4 = 20")
    assert set(exchanges[0]["request"]["headers"]) == {"accept", "content-type"}


def test_the_api_key_is_never_written_to_a_cassette(tmp_path: Path, dialect_server: Any,
                                                    hosts: Any,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPEARPY_KEY", SECRET)
    # An upstream that echoes the credential back, as 401 pages often do.
    with _echo_server() as echo_url:
        ant = dialect_server([{"reply": {"content": "ok"}}], "anthropic", api_key=SECRET)
        config = write_config(tmp_path / "c.toml", {
            "echo": {"base_url": echo_url, "api_key_env": "SPEARPY_KEY", "model": "m"},
            "claude": {"kind": "anthropic", "base_url": ant.base_url,
                       "api_key_env": "SPEARPY_KEY", "model": "m"}}, default="echo")
        cassette = tmp_path / "run.json"
        host = hosts(config_file=config, record=cassette)
        p = Probe(host, wat_module("probe.wat"))
        try:
            fd = p.hc("cchat_create")
            p.write_msg(fd, "user", "hi")
            echoed = p.recv_json(p.hc("cchat_send", fd, 0))
            # The echo reached the host (the recorder sees it) but not the guest.
            assert SECRET not in echoed["error"]["message"]
            assert "[redacted]" in echoed["error"]["message"]
            p.set_param(fd, "backend", "claude")
            assert "error" not in p.recv_json(p.hc("cchat_send", fd, 0))
        finally:
            p.close()
    text = cassette.read_text()
    assert SECRET not in text and SECRET[3:] not in text  # nor does the cassette
    assert "<redacted>" in text
    data = json.loads(text)
    assert [e["backend"] for e in data["exchanges"]] == ["echo", "claude"]
    for exchange in data["exchanges"]:
        assert not {"authorization", "x-api-key"} & set(exchange["request"]["headers"])
    assert data["exchanges"][1]["request"]["headers"]["anthropic-version"] == "2023-06-01"


def test_a_diverging_request_fails_loudly_naming_the_first_difference(
        tmp_path: Path, dialect_server: Any, hosts: Any) -> None:
    server = dialect_server(MULTI_SCRIPT)
    cassette = tmp_path / "run.json"
    record_multi(hosts, server, cassette)
    data = json.loads(cassette.read_text())
    data["exchanges"][1]["request"]["body"]["messages"][3]["content"] = '{"sum":6}'
    edited = tmp_path / "edited.json"
    edited.write_text(json.dumps(data))

    host = hosts(backend=f"replay:{edited}")
    result = host.run(MULTI_WASM)
    assert result.exit_code == 2 and result.stdout is not None  # the sample's error exit
    body = json.loads(result.stdout.decode().split("error body: ", 1)[1])
    assert body["error"]["code"] == "replay_mismatch"
    message = body["error"]["message"]
    assert "request 2 diverges from the recording at body.messages[3].content" in message
    assert 'recorded "{\\"sum\\":6}", got "{\\"sum\\":5}"' in message
    assert host.replay_mismatch() == message

    data["exchanges"] = data["exchanges"][:2]
    short = tmp_path / "short.json"
    short.write_text(json.dumps(data))
    host = hosts(backend=f"replay:{short}")
    assert host.run(MULTI_WASM).exit_code == 2
    assert "request 2 diverges" in (host.replay_mismatch() or "")


def test_extra_requests_and_a_wrong_backend_are_divergences_too(
        tmp_path: Path, dialect_server: Any, hosts: Any) -> None:
    server = dialect_server(MULTI_SCRIPT)
    cassette = tmp_path / "run.json"
    record_multi(hosts, server, cassette)
    data = json.loads(cassette.read_text())
    data["exchanges"] = data["exchanges"][:3]
    short = tmp_path / "short.json"
    short.write_text(json.dumps(data))
    host = hosts(backend=f"replay:{short}")
    host.run(MULTI_WASM)
    assert "request 4 goes beyond the recording, which holds 3 exchanges" in (
        host.replay_mismatch() or "")
    data = json.loads(cassette.read_text())
    data["backends"]["other"] = data["backends"]["openai"]
    data["exchanges"][0]["backend"] = "other"
    other = tmp_path / "other.json"
    other.write_text(json.dumps(data))
    host = hosts(backend=f"replay:{other}")
    host.run(MULTI_WASM)
    assert "request 1 went to backend 'openai'; the recording has 'other'" in (
        host.replay_mismatch() or "")


def test_failed_attempts_and_retries_replay_the_same_way(tmp_path: Path, dialect_server: Any,
                                                         hosts: Any) -> None:
    script = json.loads(MULTI_SCRIPT.read_text())
    script["rules"].insert(0, {"when": {"tool_messages": 1}, "times": 1,
                               "reply": {"status": 503, "headers": {"Retry-After": "0"}}})
    script["rules"].insert(0, {"when": {"tool_messages": 2}, "times": 1,
                               "reply": {"fault": "reset"}})
    server = dialect_server(script)
    first, second = tmp_path / "a.json", tmp_path / "b.json"
    stdout = record_multi(hosts, server, first, max_retries=1)
    exchanges = json.loads(first.read_text())["exchanges"]
    assert len(exchanges) == 6
    assert exchanges[1]["response"]["status"] == 503
    assert exchanges[3]["error"]["type"] in ("RemoteProtocolError", "ReadError")
    server.stop()
    result = hosts(backend=f"replay:{first}", record=second).run(MULTI_WASM)
    assert result.stdout == stdout
    assert second.read_bytes() == first.read_bytes()


def test_an_unanswered_error_replays_as_the_same_error_body(tmp_path: Path, dialect_server: Any,
                                                            hosts: Any) -> None:
    server = dialect_server([{"reply": {"fault": "truncate", "content": "x" * 100}}])
    cassette = tmp_path / "err.json"

    def send(host: Host) -> dict[str, Any]:
        p = Probe(host, wat_module("probe.wat"))
        try:
            fd = p.hc("cchat_create")
            p.write_msg(fd, "user", "hi")
            body = p.recv_json(p.hc("cchat_send", fd, 0))
        finally:
            p.close()
        del body["_spear"]["elapsed_ms"]
        return body

    live = send(hosts(base_url=server.base_url, model="m", record=cassette))
    assert live["error"]["code"] == "upstream_protocol_error"
    assert send(hosts(backend=f"replay:{cassette}")) == live


def test_an_anthropic_run_replays_as_anthropic(tmp_path: Path, dialect_server: Any,
                                               hosts: Any) -> None:
    server = dialect_server(MULTI_SCRIPT, "anthropic")
    config = write_config(tmp_path / "c.toml", {"claude": {
        "kind": "anthropic", "base_url": server.base_url, "model": "m", "api_key_env": ""}},
        default="claude")
    first, second = tmp_path / "a.json", tmp_path / "b.json"
    live = hosts(config_file=config, record=first).run(MULTI_WASM)
    assert live.exit_code == 0
    server.stop()
    replayed = hosts(backend=f"replay:{first}", record=second).run(MULTI_WASM)
    assert replayed.stdout == live.stdout
    assert second.read_bytes() == first.read_bytes()
    data = json.loads(first.read_text())
    assert data["backends"]["claude"]["kind"] == "anthropic"
    assert data["exchanges"][0]["request"]["url"].endswith("/v1/messages")


def test_a_configured_replay_backend(tmp_path: Path, dialect_server: Any, hosts: Any) -> None:
    server = dialect_server(MULTI_SCRIPT)
    cassette = tmp_path / "run.json"
    stdout = record_multi(hosts, server, cassette)
    config = write_config(tmp_path / "c.toml", {"ci": {"kind": "replay",
                                                       "cassette": "run.json"}}, default="ci")
    result = hosts(config_file=config).run(MULTI_WASM)
    assert result.stdout == stdout


def test_unusable_cassettes_fail_at_start(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    for text, problem in (("{", "not valid JSON"),
                          ('{"exchanges": []}', '"spearpy_cassette": 1'),
                          ('{"spearpy_cassette": 1, "backends": {}, "exchanges": [{}]}',
                           "exchange 0 names no recorded backend")):
        bad.write_text(text)
        with pytest.raises(ConfigError, match=problem):
            Host(backend=f"replay:{bad}", cache_dir=None)
    with pytest.raises(ConfigError, match="cannot read the cassette"):
        Host(backend=f"replay:{tmp_path / 'missing.json'}", cache_dir=None)


def test_cli_record_then_replay(tmp_path: Path) -> None:
    first, second = tmp_path / "a.json", tmp_path / "b.json"
    base = [sys.executable, "-c", "from spearpy.cli import main; main()", "run", "--no-cache"]

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*base, *args, str(MULTI_WASM)], cwd=ROOT, capture_output=True,
                              text=True, timeout=300, check=False)

    recorded = run("--backend", f"scripted:{MULTI_SCRIPT}", "--model", "m", "--record", str(first))
    assert recorded.returncode == 0 and recorded.stdout == MULTI_STDOUT, recorded.stderr
    replayed = run("--backend", f"replay:{first}", "--record", str(second))
    assert replayed.returncode == 0 and replayed.stdout == MULTI_STDOUT, replayed.stderr
    assert second.read_bytes() == first.read_bytes()
    # A guest whose requests differ from the cassette fails the run loudly.
    other = ROOT / "wasm-samples" / "c_tool_sum.wasm"
    diverged = subprocess.run([*base, "--backend", f"replay:{first}", str(other)], cwd=ROOT,
                              capture_output=True, text=True, timeout=300, check=False)
    assert diverged.returncode == 138, diverged.stdout + diverged.stderr
    assert "replay_mismatch" in diverged.stderr and "body." in diverged.stderr


# ---- pieces ------------------------------------------------------------------------


def test_first_difference_names_the_path() -> None:
    assert first_difference({"a": [1, {"b": "x"}]}, {"a": [1, {"b": "x"}]}) is None
    assert first_difference({"a": [1, {"b": "x"}]}, {"a": [1, {"b": "y"}]}, "body") == (
        'body.a[1].b: recorded "x", got "y"')
    assert first_difference({"a": 1}, {"a": 1, "c": 2}) == ".c: recorded nothing, got 2"
    assert first_difference([1, 2], [1]) == "(root): recorded 2 items, got 1"
    assert first_difference({"n": 1}, {"n": True}) == ".n: recorded 1, got true"


def test_secrets_are_scrubbed_everywhere() -> None:
    url, found = redact_url("https://h/v1/x?key=abcdefgh&alt=json")
    assert url == "https://h/v1/x?key=%3Credacted%3E&alt=json" and found == ["abcdefgh"]
    value = {"k abcdefgh": ["x abcdefgh y", 3, {"z": "abcdefgh"}]}
    assert scrub(value, ["abcdefgh"]) == {
        "k <redacted>": ["x <redacted> y", 3, {"z": "<redacted>"}]}


class _Echo(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        got = self.headers.get("Authorization", "")
        body = json.dumps({"error": {"message": f"Incorrect API key provided: {got}",
                                     "code": "invalid_api_key"}}).encode()
        self.send_response(401)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@contextlib.contextmanager
def _echo_server() -> Iterator[str]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Echo)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join()


def test_a_run_without_upstream_traffic_records_and_replays(tmp_path: Path, hosts: Any) -> None:
    import wasmtime

    quiet = bytes(wasmtime.wat2wasm(
        "(module (memory (export \"memory\") 1) (func (export \"_start\")))"))
    first, second = tmp_path / "a.json", tmp_path / "b.json"
    assert hosts(record=first).run(quiet).exit_code == 0
    assert json.loads(first.read_text())["exchanges"] == []
    host = hosts(backend=f"replay:{first}", record=second)
    assert host.run(quiet).exit_code == 0
    assert second.read_bytes() == first.read_bytes()
    backend, error = host.backend_for("")
    assert backend is None and error is not None and "never used it" in error
