"""The guest samples in wasm-samples/, run the way a user runs them.

Every manifest entry goes through the real CLI (`spearpy run`, a subprocess)
against its scripted model and must exit with `expect_exit` and print each
`expect_stdout` line. The tool_sum agents in C (raw ABI, arena), C (SDK,
allocator) and Rust must produce the same upstream transcript, and so must
the two mcp_time agents (C and Rust), which narrow MCP to one tool. Hostile
samples must end the way the host's limits say, and leave the host usable.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from spearpy.host import Host
from spearpy.testing import Script, ScriptedServer

ROOT = Path(__file__).resolve().parents[1]
MANIFEST_PATH = ROOT / "wasm-samples" / "manifest.json"
MANIFEST: list[dict[str, Any]] = json.loads(MANIFEST_PATH.read_text())
BY_NAME = {s["name"]: s for s in MANIFEST}
FIELDS = {"name", "wasm", "source", "sha256", "demonstrates", "script", "expect_exit",
          "expect_stdout", "args", "host_args", "hostile"}
TOOL_SUM = ["c_tool_sum", "c_tool_sum_sdk", "rust_tool_sum"]
MCP_TIME = ["c_mcp_time", "rust_mcp_time"]
# Only a guard against a hung host; no test asserts on time.
HANG_GUARD_S = 300


# The console scripts installed beside this interpreter (mcp-server-time, which
# c_mcp_time's registry record launches) are found as a user's shell finds them.
_ENV = {**os.environ, "PATH": os.pathsep.join((str(Path(sys.executable).parent),
                                               os.environ.get("PATH", "")))}


def spearpy_run(*args: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-c", "from spearpy.cli import main; main()", "run", "--no-cache", *args]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=HANG_GUARD_S,
                          check=False, env=_ENV)


def run_sample(sample: dict[str, Any], *host_args: str) -> subprocess.CompletedProcess[str]:
    backend = ["--backend", f"scripted:{sample['script']}"] if sample["script"] else []
    return spearpy_run(*backend, *sample["host_args"], *host_args, sample["wasm"], "--",
                       *sample["args"])


# ---- the manifest itself -----------------------------------------------------------


def test_manifest_entries_are_complete_and_current() -> None:
    assert len(BY_NAME) == len(MANIFEST), "sample names must be unique"
    for s in MANIFEST:
        assert set(s) == FIELDS, s["name"]
        wasm = ROOT / s["wasm"]
        assert hashlib.sha256(wasm.read_bytes()).hexdigest() == s["sha256"], (
            f"{s['name']}: stale sha256; run tools/build_wasm.sh")
        assert (ROOT / s["source"]).is_file(), s["name"]
        assert isinstance(s["expect_exit"], int) and s["expect_stdout"], s["name"]
        if s["script"] is not None:
            Script.load(ROOT / s["script"])  # raises on any mistake in the script


def test_every_sample_source_is_in_the_manifest() -> None:
    sources = {s["source"] for s in MANIFEST}
    on_disk = {str(p.relative_to(ROOT)) for p in ROOT.glob("guest/*/samples/*") if p.is_file()}
    assert on_disk == sources


def test_every_script_is_used() -> None:
    used = {s["script"] for s in MANIFEST}
    on_disk = {str(p.relative_to(ROOT)) for p in (ROOT / "wasm-samples/scripts").glob("*.json")}
    assert on_disk == used - {None}


# ---- each sample under its script ----------------------------------------------------


@pytest.mark.parametrize("name", sorted(BY_NAME))
def test_sample_exits_as_documented(name: str) -> None:
    sample = BY_NAME[name]
    proc = run_sample(sample)
    shown = f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr[-4000:]}"
    assert proc.returncode == sample["expect_exit"], shown
    for line in sample["expect_stdout"]:
        assert line in proc.stdout, f"missing {line!r}\n{shown}"


# ---- one agent, three implementations, one transcript --------------------------------


def upstream_transcript(name: str) -> list[dict[str, Any]]:
    sample = BY_NAME[name]
    with ScriptedServer(ROOT / sample["script"]) as server:
        proc = spearpy_run("--base-url", server.base_url, "--model", "scripted",
                           "--max-retries", "0", *sample["host_args"], sample["wasm"])
        assert proc.returncode == 0, proc.stdout + proc.stderr
        bodies = [r.body for r in server.requests if r.path.endswith("/chat/completions")]
    assert all(b is not None for b in bodies)
    return [b for b in bodies if b is not None]


def test_tool_sum_agents_send_the_same_requests() -> None:
    transcripts = {name: upstream_transcript(name) for name in TOOL_SUM}
    reference = transcripts["c_tool_sum"]
    assert len(reference) == 2, reference  # ask -> tool call, tool result -> answer
    first, second = reference
    assert [t["function"]["name"] for t in first["tools"]] == ["sum"]
    assert [m["role"] for m in second["messages"]] == ["system", "user", "assistant", "tool"]
    assert second["messages"][-1]["content"] == '{"sum":42}'
    # Host-only params (the raw sample's arena) never reach the model.
    assert not any("tool_arena" in json.dumps(b) for b in reference)
    for name in TOOL_SUM[1:]:
        assert transcripts[name] == reference, name


def test_mcp_time_agents_narrow_mcp_alike() -> None:
    """The run allows the time server's two tools; each guest narrows them to
    get_* on its session (C: sp_mcp_select, Rust: Session::mcp_allow_tools)."""
    transcripts = {name: upstream_transcript(name) for name in MCP_TIME}
    reference = transcripts["c_mcp_time"]
    assert len(reference) == 2, reference  # ask -> MCP tool call, its result -> answer
    first, second = reference
    assert [t["function"]["name"] for t in first["tools"]] == [
        "mcp__dGltZQ__Z2V0X2N1cnJlbnRfdGltZQ"]  # get_current_time; convert_time narrowed away
    assert [m["role"] for m in second["messages"]] == ["user", "assistant", "tool"]
    # The tool result holds the current time: compare everything but that.
    for name in MCP_TIME:
        result = json.loads(transcripts[name][1]["messages"][-1]["content"])
        assert result["timezone"] == "UTC" and result.pop("datetime"), name
        transcripts[name][1]["messages"][-1]["content"] = result
    assert transcripts["rust_mcp_time"] == reference


@pytest.mark.parametrize("name", MCP_TIME)
def test_mcp_time_on_a_run_without_mcp_hears_eacces(name: str) -> None:
    proc = run_sample({**BY_NAME[name], "host_args": []})
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "mcp: not allowed by the run's task" in proc.stdout


# ---- hostile guests: the host's limits decide, and the host stays up ------------------


def test_infinite_loop_runs_out_of_fuel() -> None:
    proc = run_sample({**BY_NAME["c_infinite_loop"], "host_args": []}, "--fuel", "200000000")
    assert proc.returncode == 135, proc.stderr
    assert "spinning forever" in proc.stdout


def test_log_flood_stops_at_the_log_budget() -> None:
    proc = run_sample(BY_NAME["c_log_flood"], "--max-log-bytes", "100000")
    assert proc.returncode == 136, proc.stderr
    assert "flood:" not in proc.stdout  # stopped before the flood finished


def test_fd_exhaustion_follows_the_configured_cap() -> None:
    proc = run_sample(BY_NAME["c_fd_exhaustion"], "--max-open-fds", "50")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "EMFILE after 50 sessions" in proc.stdout


def test_host_keeps_working_after_hostile_guests() -> None:
    # One Host, many runs: what a hostile guest did must not leak into the next run.
    host = Host(backend=f"scripted:{ROOT / BY_NAME['c_tool_sum']['script']}", model="scripted",
                cache_dir=None, max_retries=0, fuel=2_000_000_000, max_memory=256 << 20)
    try:
        outcomes = {}
        # Samples that need no particular script (oob_pointers takes any reply).
        for name in ["c_infinite_loop", "c_memory_bomb", "c_fd_exhaustion", "c_oob_pointers",
                     "c_log_flood", "c_tool_sum", "rust_tool_sum"]:
            result = host.run(ROOT / BY_NAME[name]["wasm"])
            outcomes[name] = (result.outcome, result.exit_code)
            if name.endswith("tool_sum"):
                assert b'answer: 7 + 35 = {"sum":42}' in (result.stdout or b""), name
    finally:
        host.close()
    assert outcomes.pop("c_infinite_loop") == ("fuel_exhausted", 135)
    assert outcomes == dict.fromkeys(outcomes, ("exited", 0))
