"""`spearpy batch` has every output and sandbox flag of `spearpy run`, same
names and meaning: the events, transcripts and metrics of all runs land in
one file / directory (whichever executor ran them), and --env, --env-inherit,
--dir and --invoke reach every guest."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import wasmtime

from spearpy.cli.batch import batch
from spearpy.cli.run import run

ROOT = Path(__file__).resolve().parents[1]
TOOL_SUM = ROOT / "wasm-samples" / "c_tool_sum.wasm"
TOOL_SCRIPT = ROOT / "wasm-samples" / "scripts" / "tool_sum.json"
HANG_GUARD_S = 300

# _start writes the name of preopen fd 3 to stdout.
PREOPEN_GUEST = """(module
  (import "wasi_snapshot_preview1" "fd_prestat_dir_name"
    (func $name (param i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "fd_write" (func $write (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  (func (export "_start")
    (drop (call $name (i32.const 3) (i32.const 100) (i32.const 50)))
    (i32.store (i32.const 0) (i32.const 100))
    (i32.store (i32.const 4) (i32.const 5))
    (drop (call $write (i32.const 1) (i32.const 0) (i32.const 1) (i32.const 8)))))"""


def run_batch_cli(tmp_path: Path, module: Path, inputs: list[dict[str, object]], *flags: str,
                  env: dict[str, str] | None = None) -> tuple[subprocess.CompletedProcess[str],
                                                              dict[str, dict[str, object]]]:
    source = tmp_path / "in.jsonl"
    source.write_text("".join(json.dumps(i) + "\n" for i in inputs))
    out = tmp_path / "out.jsonl"
    done = subprocess.run([sys.executable, "-m", "spearpy", "batch", str(module), "--inputs",
                           str(source), "--out", str(out), "--no-cache", *flags],
                          capture_output=True, text=True, timeout=HANG_GUARD_S, check=False,
                          env={**os.environ, **(env or {})}, cwd=tmp_path)
    records = {} if not out.exists() else {
        str(r["id"]): r for r in map(json.loads, out.read_text().splitlines())}
    return done, records


def test_batch_offers_every_flag_of_run_but_stdin() -> None:
    def options(command: object) -> dict[str, str | None]:
        return {opt: p.help for p in command.params  # type: ignore[attr-defined]
                for opt in getattr(p, "opts", []) if opt.startswith("--")}

    of_run, of_batch = options(run), options(batch)
    # Batch inputs carry their stdin; a user stream bridges one run to one terminal.
    missing = set(of_run) - set(of_batch) - {"--stdin", "--stream-stdio", "--stream-id"}
    assert not missing
    for flag in ("--events", "--transcript", "--metrics-file", "--log-format", "--env",
                 "--env-inherit", "--dir", "--invoke", "--max-memory"):
        assert of_batch[flag] == of_run[flag], flag


@pytest.mark.parametrize("mode", ["--threads", "--processes"])
def test_events_transcripts_and_metrics_of_all_runs(tmp_path: Path, mode: str) -> None:
    done, records = run_batch_cli(
        tmp_path, TOOL_SUM, [{"id": "a"}, {"id": "b"}, {"id": "c"}], mode, "--jobs", "2",
        "--backend", f"scripted:{TOOL_SCRIPT}", "--events", "ev.jsonl", "--transcript", "tr",
        "--metrics-file", "m.prom")
    assert done.returncode == 0, done.stderr
    assert {r["outcome"] for r in records.values()} == {"exited"}
    run_ids = {r["run_id"] for r in records.values()}
    assert len(run_ids) == 3
    events = [json.loads(line) for line in (tmp_path / "ev.jsonl").read_text().splitlines()]
    assert {e["run_id"] for e in events if e["kind"] == "run_end"} == run_ids
    assert sum(e["kind"] == "tool_end" for e in events) == 3
    for run_id in run_ids:  # one run's events are together and in order
        seqs = [e["seq"] for e in events if e["run_id"] == run_id]
        assert seqs == list(range(len(seqs)))
    transcripts = sorted(p.name for p in (tmp_path / "tr").iterdir())
    assert transcripts == sorted(f"{r}-fd1000.json" for r in run_ids)
    metrics = (tmp_path / "m.prom").read_text()
    assert 'spearpy_tool_calls_total{tool="sum"} 3.0' in metrics
    # Each record's events were taken out before it was written.
    assert all("_events" not in r for r in records.values())


def test_log_format_json_logs_every_run(tmp_path: Path) -> None:
    done, records = run_batch_cli(tmp_path, TOOL_SUM, [{"id": 1}, {"id": 2}], "--threads",
                                  "--backend", f"scripted:{TOOL_SCRIPT}", "--log-format", "json")
    assert done.returncode == 0, done.stderr
    logged = [json.loads(line) for line in done.stderr.splitlines() if line.startswith("{")]
    ends = {entry["run_id"] for entry in logged if entry.get("event") == "run ended"}
    assert ends == {r["run_id"] for r in records.values()}


def test_no_output_flag_means_no_run_id_and_no_event_shipping(tmp_path: Path) -> None:
    done, records = run_batch_cli(tmp_path, TOOL_SUM, [{"id": 1}], "--threads",
                                  "--backend", f"scripted:{TOOL_SCRIPT}")
    assert done.returncode == 0, done.stderr
    assert "run_id" not in records["1"]


@pytest.mark.parametrize("mode", ["--threads", "--processes"])
def test_env_env_inherit_and_invoke_reach_every_guest(tmp_path: Path, mode: str) -> None:
    from tests.probe import wat_module

    module = tmp_path / "wasi.wasm"
    module.write_bytes(wat_module("wasi.wat"))
    done, records = run_batch_cli(
        tmp_path, module, [{"id": "plain"}, {"id": "own", "env": {"FOO": "mine"}}], mode,
        "--invoke", "env_dump", "--env", "FOO=1", "--env", "PASSED_TOKEN", "--env-inherit",
        env={"PASSED_TOKEN": "t0k", "INHERITED_VAR": "yes", "HIDDEN_TOKEN": "nope"})
    assert done.returncode == 0, done.stderr
    plain = str(records["plain"]["stdout"]).split("\0")
    assert "FOO=1" in plain and "PASSED_TOKEN=t0k" in plain and "INHERITED_VAR=yes" in plain
    assert not any(v.startswith("HIDDEN_TOKEN=") for v in plain)  # the deny-list holds
    assert "FOO=mine" in str(records["own"]["stdout"]).split("\0")  # the input's env wins


def test_a_key_variable_is_refused_by_name(tmp_path: Path) -> None:
    done, records = run_batch_cli(tmp_path, TOOL_SUM, [{"id": 1}], "--env", "OPENAI_API_KEY",
                                  env={"OPENAI_API_KEY": "sk-secret-value-123456"})
    assert done.returncode == 2
    assert "OPENAI_API_KEY is refused" in done.stderr
    assert records == {}


def test_dir_preopens_for_every_run(tmp_path: Path) -> None:
    module = tmp_path / "preopen.wasm"
    module.write_bytes(bytes(wasmtime.wat2wasm(PREOPEN_GUEST)))
    (tmp_path / "data").mkdir()
    done, records = run_batch_cli(tmp_path, module, [{"id": 1}, {"id": 2}], "--threads",
                                  "--dir", f"{tmp_path / 'data'}:/data")
    assert done.returncode == 0, done.stderr
    assert [r["stdout"] for r in records.values()] == ["/data", "/data"]
    missing, _ = run_batch_cli(tmp_path, module, [{"id": 1}], "--dir", "nope:/data")
    assert missing.returncode == 2 and "'nope' is not a directory" in missing.stderr
