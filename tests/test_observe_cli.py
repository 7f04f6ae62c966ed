"""The issue's done-when, end to end through the real CLI in a subprocess:
`spearpy run` of a multi-tool agent with --events, --transcript, --metrics-file
(and JSON logs at debug level) against a loopback model that requires the API
key. Events pair 1:1, the transcript replays what the model was sent, the
metrics equal the event counts, and the key is nowhere in any output."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from spearpy.observe.events import Event
from spearpy.testing import Script, ScriptedServer
from tests.test_observe_events import MULTI_TOOL_SCRIPT, agent_wasm, check_invariants

ROOT = Path(__file__).resolve().parents[1]


def _manifest_entry(name: str) -> dict[str, Any] | None:
    path = ROOT / "wasm-samples" / "manifest.json"
    if not path.is_file():
        return None
    for entry in json.loads(path.read_text()):
        if entry.get("name") == name and (ROOT / entry["wasm"]).is_file():
            return dict(entry)
    return None


def _clean_env(secret: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("OPENAI_", "SPEARPY_"))}
    env["OPENAI_API_KEY"] = secret
    return env


def _read_events(path: Path) -> list[Event]:
    events = []
    for line in path.read_text().splitlines():
        record = json.loads(line)
        kind, run_id, seq, ts, fd = (record.pop(k) for k in ("kind", "run_id", "seq", "ts", "fd"))
        events.append(Event(kind, run_id, seq, ts, fd, record))
    return events


def _metrics(path: Path) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    values = {}
    for family in text_string_to_metric_families(path.read_text()):
        for sample in family.samples:
            values[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return values


def _sum(metrics: dict[tuple[str, Any], float], name: str) -> float:
    return sum(v for (n, _), v in metrics.items() if n == name)


def _run_cli(wasm: Path, script: Any, out: Path, *extra: str) -> dict[str, Any]:
    secret = f"sk-spearpy-secret-{uuid.uuid4().hex}"
    with ScriptedServer(Script.load(script), api_key=secret) as server:
        done = subprocess.run(
            [sys.executable, "-m", "spearpy", "run", str(wasm), "--no-cache",
             "--base-url", server.base_url, "--model", "scripted", "--max-retries", "0",
             "--events", str(out / "events.jsonl"), "--transcript", str(out / "transcripts"),
             "--metrics-file", str(out / "metrics.prom"), "--log-format", "json",
             "--log-level", "debug", "--log-file", str(out / "spearpy.log"), *extra],
            capture_output=True, text=True, env=_clean_env(secret), timeout=120, cwd=ROOT)
        requests = server.requests
    return {"secret": secret, "done": done, "requests": requests}


def _check_all(out: Path, ran: dict[str, Any]) -> tuple[list[Event], dict[str, Any]]:
    done, secret, requests = ran["done"], ran["secret"], ran["requests"]
    assert done.returncode == 0, done.stderr
    # The key really went upstream: the server refuses requests without it.
    assert requests and all(r.headers.get("authorization") == f"Bearer {secret}"
                            for r in requests)

    events = _read_events(out / "events.jsonl")
    counts = check_invariants(events)
    starts = Counter(e.data["tool_call_id"] for e in events if e.kind == "tool_start")
    ends = Counter(e.data["tool_call_id"] for e in events if e.kind == "tool_end")
    assert starts == ends and set(starts.values()) == {1}

    # The transcript replays the conversation: every request sent upstream is
    # a prefix of it, and the last one is all of it but the final answer.
    files = sorted((out / "transcripts").glob("*.json"))
    assert len(files) == 1
    transcript = json.loads(files[0].read_text())
    messages = transcript["messages"]
    for request in requests:
        sent = request.body["messages"]
        assert messages[:len(sent)] == sent
        assert transcript["tools"] == request.body["tools"]
    assert len(messages) == len(requests[-1].body["messages"]) + 1
    assert messages[-1]["role"] == "assistant" and not messages[-1].get("tool_calls")
    assert transcript["run_id"] == events[0].run_id
    assert transcript["tool_calls"] == counts["tool_end"]
    assert transcript["iterations"] == len(requests)
    assert transcript["usage"]["total_tokens"] == sum(
        (e.data.get("usage") or {}).get("total_tokens", 0)
        for e in events if e.kind == "completion_end")

    metrics = _metrics(out / "metrics.prom")
    tool_ends = [e for e in events if e.kind == "tool_end"]
    assert _sum(metrics, "spearpy_tool_calls_total") == len(tool_ends)
    for name, count in Counter(e.data["name"] for e in tool_ends).items():
        assert metrics[("spearpy_tool_calls_total", (("tool", name),))] == count
    assert _sum(metrics, "spearpy_tool_call_iterations_total") == counts["completion_end"]
    assert _sum(metrics, "spearpy_completion_latency_seconds_count") == counts["completion_end"]
    assert _sum(metrics, "spearpy_tool_duration_seconds_count") == len(tool_ends)
    assert _sum(metrics, "spearpy_tool_output_bytes_total") == sum(
        e.data["output_bytes"] for e in tool_ends)
    assert _sum(metrics, "spearpy_tool_call_failures_total") == sum(
        1 for e in tool_ends if e.data["error"] is not None)
    assert _sum(metrics, "spearpy_sends_total") == counts["send_end"]

    # Every log line names its run, session and iteration; no tool content.
    lines = [json.loads(line) for line in (out / "spearpy.log").read_text().splitlines()]
    assert lines and all({"run_id", "session_fd", "iteration"} <= set(line) for line in lines)
    tool_lines = [line for line in lines if line["event"].startswith("tool call")]
    assert len(tool_lines) == 2 * len(tool_ends)
    for line in tool_lines:
        digest = line.get("arguments") or line.get("output")
        assert set(digest) == {"bytes", "sha256"}

    # The key appears nowhere: files, stdout, stderr.
    everything = [done.stdout, done.stderr]
    everything += [p.read_text() for p in out.rglob("*") if p.is_file()]
    assert all(secret not in text for text in everything)
    assert all("Bearer" not in text for text in everything)
    return events, transcript


def test_done_when_with_the_wat_agent(tmp_path: Path) -> None:
    wasm = tmp_path / "agent.wasm"
    wasm.write_bytes(agent_wasm([("system", "be brief"), ("user", "go")], ["echo", "stamp"]))
    out = tmp_path / "out"
    ran = _run_cli(wasm, MULTI_TOOL_SCRIPT, out)
    events, transcript = _check_all(out, ran)
    # The guest printed the final body: its message is the transcript's last.
    body = json.loads(ran["done"].stdout.splitlines()[-1])
    assert transcript["messages"][-1] == body["choices"][0]["message"]
    assert [e.data["name"] for e in events if e.kind == "tool_end"] == ["echo", "echo", "stamp"]


@pytest.mark.parametrize("name", ["c_multi_tool", "rust_multi_tool"])
def test_done_when_with_the_multi_tool_sample(tmp_path: Path, name: str) -> None:
    entry = _manifest_entry(name)
    if entry is None:
        pytest.skip(f"{name} is not built (tools/build_wasm.sh)")
    out = tmp_path / "out"
    ran = _run_cli(ROOT / entry["wasm"], json.loads((ROOT / entry["script"]).read_text()), out)
    events, transcript = _check_all(out, ran)
    assert [e.data["name"] for e in events if e.kind == "tool_end"] == \
        ["add", "mul", "add", "upper"]
    assert "20" in transcript["messages"][-1]["content"]


def test_log_content_opts_in(tmp_path: Path) -> None:
    wasm = tmp_path / "agent.wasm"
    wasm.write_bytes(agent_wasm([("user", "go")], ["echo", "stamp"]))
    out = tmp_path / "out"
    ran = _run_cli(wasm, MULTI_TOOL_SCRIPT, out, "--log-content")
    assert ran["done"].returncode == 0, ran["done"].stderr
    log = (out / "spearpy.log").read_text()
    assert '"arguments": "{\\"text\\":\\"hello\\"}"' in log
    assert '"output": "{\\"ok\\":true}"' in log
    events = (out / "events.jsonl").read_text()
    assert '"output":"{\\"ok\\":true}"' in events
    assert ran["secret"] not in log + events


def test_quiet_leaves_stderr_to_the_guest_and_errors(tmp_path: Path) -> None:
    wasm = tmp_path / "agent.wasm"
    wasm.write_bytes(agent_wasm([("user", "go")], ["echo", "stamp"]))
    with ScriptedServer(Script.load(MULTI_TOOL_SCRIPT)) as server:
        args = [sys.executable, "-m", "spearpy", "run", str(wasm), "--no-cache",
                "--base-url", server.base_url, "--model", "scripted"]
        loud = subprocess.run(args, capture_output=True, text=True, timeout=120, cwd=ROOT,
                              env=_clean_env("unused-key-000000"))
        quiet = subprocess.run([*args, "--quiet"], capture_output=True, text=True,
                               timeout=120, cwd=ROOT, env=_clean_env("unused-key-000000"))
    assert loud.returncode == quiet.returncode == 0
    assert "spearpy: [fd 1000]   calling echo (call_0_0)" in loud.stderr
    assert "exited, exit code 0" in loud.stderr
    assert quiet.stderr == ""
    assert 'done: {\\"ok\\":true}' in quiet.stdout  # the guest's own output stays


def test_otel_spans_file(tmp_path: Path) -> None:
    pytest.importorskip("opentelemetry.sdk")
    wasm = tmp_path / "agent.wasm"
    wasm.write_bytes(agent_wasm([("user", "go")], ["echo", "stamp"]))
    out = tmp_path / "out"
    ran = _run_cli(wasm, MULTI_TOOL_SCRIPT, out, "--otel-spans", str(out / "spans.jsonl"))
    assert ran["done"].returncode == 0, ran["done"].stderr
    spans = [json.loads(line) for line in (out / "spans.jsonl").read_text().splitlines()]
    names = Counter(span["name"] for span in spans)
    assert names == {"chat scripted": 3, "execute_tool echo": 2, "execute_tool stamp": 1,
                     "invoke_agent agent.wasm": 1, "spearpy.run agent.wasm": 1}
    assert len({span["context"]["trace_id"] for span in spans}) == 1
    assert ran["secret"] not in (out / "spans.jsonl").read_text()


@pytest.mark.parametrize("flag", ["--events", "--transcript", "--metrics-file", "--log-file"])
def test_an_unwritable_output_path_is_refused_before_the_run(tmp_path: Path, flag: str) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    hello = ROOT / "wasm-samples" / "c_hello.wasm"
    done = subprocess.run([sys.executable, "-m", "spearpy", "run", "--no-cache", flag,
                           str(blocker / "sub" / "out"), str(hello)], capture_output=True,
                          text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 2, done.stderr
    assert str(blocker) in done.stderr and "Traceback" not in done.stderr
    assert "hello from C" not in done.stdout  # refused before the guest ran
