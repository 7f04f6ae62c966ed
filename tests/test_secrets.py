"""The upstream API key never reaches the guest, nor anything spearpy writes.

A unique key is put where the host reads it (OPENAI_API_KEY), the scripted
upstream insists on it (401 without it, so every passing test proves the key
was sent), and then everything is scanned for it and for pieces of it: guest
stdout/stderr, the guest's environment (also with --env-inherit), response
bodies and their `_spear`, events, transcripts, structured logs, metrics,
OpenTelemetry spans, the record cassette, error messages, and an upstream that
echoes the key back in its error and in a completion.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from spearpy import abi
from spearpy.host import Host
from spearpy.testing import ScriptedServer
from tests.probe import Probe, tool_schema, wat_module

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "wasm-samples"
KEY = f"sk-spearpy-leakcheck-{uuid.uuid4().hex}"
# A leak of part of the key is still a leak (and survives naive masking).
PIECES = [KEY, KEY[3:], KEY[-24:], KEY[:24]]
WASI = wat_module("wasi.wat")


def leaked(blob: Any) -> list[str]:
    if isinstance(blob, bytes):
        text = blob.decode("utf-8", "replace")
    elif isinstance(blob, str):
        text = blob
    else:
        text = json.dumps(blob, default=str)
    return [piece for piece in PIECES if piece in text]


def multi_tool_script() -> dict[str, Any]:
    script: dict[str, Any] = json.loads((SAMPLES / "scripts/multi_tool.json").read_text())
    return script


def echo_script() -> dict[str, Any]:
    """An upstream (or a proxy in front of it) that repeats the key back."""
    return {"rules": [
        {"when": {"request_index": 0},
         "reply": {"status": 401, "error": f"Incorrect API key provided: {KEY}"}},
    ], "default": {"content": f"your key is {KEY}, Bearer {KEY}"}}


@pytest.fixture
def key_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    yield


def assert_sent_with_the_key(server: ScriptedServer) -> None:
    assert server.requests, "nothing went upstream"
    for request in server.requests:
        assert request.headers.get("authorization") == f"Bearer {KEY}"


def test_guest_environment_never_holds_the_key(key_env: None) -> None:
    with Host(cache_dir=None) as host:
        plain = host.run(WASI, invoke="env_dump")
        given = host.run(WASI, invoke="env_dump", env={"A": "1"})
        inherited = host.run(WASI, invoke="env_dump", inherit_env=True)
    assert plain.stdout == b"" and given.stdout == b"A=1\0"
    # --env-inherit passes the operator's environment through, minus the keys.
    assert b"PATH=" in (inherited.stdout or b"")
    assert b"OPENAI_API_KEY=" not in (inherited.stdout or b"")
    for result in (plain, given, inherited):
        assert leaked(result.stdout) == []


def test_a_run_with_tools_leaks_nothing(key_env: None) -> None:
    with ScriptedServer(multi_tool_script(), api_key=KEY) as server, \
            Host(base_url=server.base_url, model="scripted", cache_dir=None,
                 max_retries=0) as host:
        result = host.run(SAMPLES / "c_multi_tool.wasm", collect_events=True)
        assert result.ok, result.stdout
        assert_sent_with_the_key(server)
    assert b'{"text":"DONE"}' in (result.stdout or b"")
    records = {"stdout": result.stdout, "stderr": result.stderr, "message": result.message,
               "events": [(e.kind, e.data) for e in result.events],
               "transcripts": result.transcripts, "usage": result.usage}
    assert {name: leaked(value) for name, value in records.items()} == {key: [] for key in records}


def test_bodies_params_and_metrics_the_guest_reads_hold_no_key(key_env: None,
                                                              make_host: Any) -> None:
    with ScriptedServer({"default": {"content": "hi"}}, api_key=KEY) as server:
        p = Probe(make_host(base_url=server.base_url), wat_module("probe.wat"))
        try:
            fd = p.hc("cchat_create")
            assert p.write_fn(fd, 0, tool_schema("echo")) == 0
            assert p.set_param(fd, "temperature", 0.1) == 0
            assert p.write_msg(fd, "user", "hello") == 0
            rfd = p.hc("cchat_send", fd, abi.SEND_ENABLE_METRICS)
            body = p.recv(rfd)[1]
            p.u32(p.A, 4096)
            n = p.hc("cchat_ctl", rfd, abi.CTL_GET_METRICS, p.D, p.A)
            metrics = p.get(p.D, n)
            p.u32(p.A, 4096)
            n = p.hc("spear_fd_ctl", rfd, abi.FD_CTL_GET_STATUS, p.D, p.A)
            status = p.get(p.D, n)
            p.run.close_all_sessions()
            transcripts = p.run.transcripts
        finally:
            p.close()
        assert_sent_with_the_key(server)
    assert json.loads(body)["_spear"]["backend"]
    for blob in (body, metrics, status, transcripts):
        assert leaked(blob) == []


def test_an_upstream_echoing_the_key_does_not_hand_it_to_the_guest(key_env: None) -> None:
    with ScriptedServer(echo_script(), api_key=KEY) as server, \
            Host(base_url=server.base_url, model="m", cache_dir=None, max_retries=0) as host:
        refused = host.run(SAMPLES / "c_chat.wasm", collect_events=True)  # the 401 echo
        answered = host.run(SAMPLES / "c_chat.wasm", collect_events=True)  # the 200 echo
        assert_sent_with_the_key(server)
    assert b"upstream_http_error" in (refused.stdout or b"")
    assert b"[redacted]" in (refused.stdout or b"")
    assert b"your key is [redacted]" in (answered.stdout or b"")
    for result in (refused, answered):
        assert leaked(result.stdout) == [] and leaked(result.stderr) == []
        assert leaked([(e.kind, e.data) for e in result.events]) == []
        assert leaked(result.transcripts) == []


def test_everything_the_cli_writes_is_clean(tmp_path: Path) -> None:
    env = {**os.environ, "OPENAI_API_KEY": KEY}
    outputs: list[tuple[str, str]] = []
    with ScriptedServer(multi_tool_script(), api_key=KEY) as tools_server, \
            ScriptedServer(echo_script(), api_key=KEY) as echo_server:
        for label, server, wasm in (("tools", tools_server, "c_multi_tool.wasm"),
                                    ("echo-401", echo_server, "c_chat.wasm"),
                                    ("echo-200", echo_server, "c_chat.wasm"),
                                    ("env", None, "")):
            out = tmp_path / label
            out.mkdir()
            args = ["--no-cache", "--max-retries", "0",
                    "--events", str(out / "events.jsonl"),
                    "--transcript", str(out / "transcripts"),
                    "--metrics-file", str(out / "metrics.prom"),
                    "--log-format", "json", "--log-level", "debug",
                    "--log-file", str(out / "log.jsonl"), "--log-content",
                    "--otel-spans", str(out / "spans.jsonl")]
            if server is None:
                target = [*args, "--env-inherit", "--invoke", "env_dump", str(out / "g.wasm")]
                (out / "g.wasm").write_bytes(WASI)
            else:
                target = [*args, "--base-url", server.base_url, "--model", "scripted",
                          "--record", str(out / "cassette.json"), str(SAMPLES / wasm)]
            done = subprocess.run([sys.executable, "-m", "spearpy", "run", *target],
                                  capture_output=True, text=True, timeout=120, env=env,
                                  cwd=ROOT, check=False)
            assert "Traceback" not in done.stderr, done.stderr
            outputs += [(f"{label} stdout", done.stdout), (f"{label} stderr", done.stderr)]
        assert_sent_with_the_key(tools_server)
        assert_sent_with_the_key(echo_server)
    files = sorted(p for p in tmp_path.rglob("*") if p.is_file() and p.suffix != ".wasm")
    assert {"events.jsonl", "log.jsonl", "metrics.prom", "cassette.json"} <= {p.name for p in files}
    assert any(p.parent.name == "transcripts" for p in files)
    assert "DONE" in dict(outputs)["tools stdout"]  # the runs did their work
    outputs += [(str(p.relative_to(tmp_path)), p.read_text("utf-8", "replace")) for p in files]
    assert {name: leaked(text) for name, text in outputs} == {name: [] for name, _ in outputs}
