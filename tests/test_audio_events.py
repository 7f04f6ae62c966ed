"""How a device fd ended reaches the operator: every mic and rtasr fd that
closes emits `audio_close` (its counts, and the last error the guest only
saw as ERR readiness), and the live view prints a device's failure."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import wasmtime

from spearpy.testing import ScriptedAsrServer

ROOT = Path(__file__).resolve().parents[1]
MIC_RTASR = ROOT / "wasm-samples" / "c_mic_rtasr.wasm"
TONE = ROOT / "wasm-samples" / "audio" / "tone.wav"
HANG_GUARD_S = 120

# Opens a mic and an rtasr fd and exits without closing either.
LEAVES_OPEN = """(module
  (import "spear" "mic_create" (func $mic (result i32)))
  (import "spear" "rtasr_create" (func $asr (result i32)))
  (import "wasi_snapshot_preview1" "proc_exit" (func $exit (param i32)))
  (memory (export "memory") 1)
  (func (export "_start") (drop (call $mic)) (drop (call $asr)) (call $exit (i32.const 0))))"""


def spearpy(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "spearpy", "run", "--no-cache", *args],
                          capture_output=True, text=True, timeout=HANG_GUARD_S, check=False,
                          cwd=ROOT)


def audio_events(path: Path) -> list[dict[str, Any]]:
    records = [json.loads(line) for line in path.read_text().splitlines()]
    return [r for r in records if r["kind"] == "audio_close"]


def test_a_refused_connection_is_named_in_the_event_and_on_stderr(tmp_path: Path) -> None:
    with ScriptedAsrServer(["unused"]) as server:
        refused = server.url.replace(str(server.port), "1", 1)  # nothing listens on port 1
    events = tmp_path / "events.jsonl"
    done = spearpy(str(MIC_RTASR), "--mic-file", str(TONE), "--max-retries", "0",
                   "--rtasr-url", refused, "--events", str(events))
    assert done.returncode == 0, done.stderr
    assert "rtasr err" in done.stdout
    closed = {e["device"]: e for e in audio_events(events)}
    rtasr, mic = closed["rtasr"], closed["mic"]
    assert "refused" in rtasr["last_error"].lower()
    assert rtasr["reason"] == "guest"  # the sample closes its fds itself
    # The guest may stop before the mic's first frame: the counts are there, not their size.
    assert mic["last_error"] is None and isinstance(mic["bytes_read"], int)
    assert "rtasr failed: websocket connect failed" in done.stderr
    assert "mic closed:" in done.stderr


def test_fds_left_open_are_closed_and_reported_at_the_runs_end(tmp_path: Path) -> None:
    module = tmp_path / "leaves_open.wasm"
    module.write_bytes(bytes(wasmtime.wat2wasm(LEAVES_OPEN)))
    events = tmp_path / "events.jsonl"
    done = spearpy(str(module), "--events", str(events))
    assert done.returncode == 0, done.stderr
    closed = audio_events(events)
    assert sorted(e["device"] for e in closed) == ["mic", "rtasr"]
    assert {e["reason"] for e in closed} == {"run_end"}
    kinds = [json.loads(line)["kind"] for line in events.read_text().splitlines()]
    assert kinds.index("run_end") > max(i for i, k in enumerate(kinds) if k == "audio_close")
