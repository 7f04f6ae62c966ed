"""A `spearpy batch` killed with SIGKILL leaves nothing in the temp directory
(issue 14, item 10): no cleanup handler runs after SIGKILL, so nothing the
batch needs may exist under a name in the first place."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from tests.test_embed_support import ECHO_WASM, Gate, make_inputs, write_inputs

# Only guards against a hung child; no assertion is about time.
WAIT_S = 120.0


def _children(pid: int) -> list[int]:
    """Direct children of `pid`, from /proc (no psutil here)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue  # exited meanwhile
        # "pid (comm) state ppid ...": comm may hold spaces and parentheses.
        fields = stat.rpartition(")")[2].split()
        if int(fields[1]) == pid:
            found.append(int(entry.name))
    return found


def _gone(pid: int) -> bool:
    """Exited (a zombie counts: an orphan's reaper in a container may be slow)."""
    try:
        stat = (Path("/proc") / str(pid) / "stat").read_text()
    except OSError:
        return True
    return stat.rpartition(")")[2].split()[0] == "Z"


def _wait_until(check: Any, what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def test_sigkilled_batch_leaves_nothing_in_the_temp_dir(tmp_path: Path, scripted: Any) -> None:
    gate = Gate("tok5")  # holds input 5 at the model: the batch is mid-way
    server = scripted(gate.script())
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    out = tmp_path / "out" / "results.jsonl"
    inputs = write_inputs(tmp_path / "in.jsonl", make_inputs(8))
    command = [sys.executable, "-m", "spearpy", "batch", str(ECHO_WASM), "--inputs", str(inputs),
               "--out", str(out), "--base-url", server.base_url, "--model", "test-model",
               "--max-retries", "0", "--no-cache", "--processes", "--jobs", "2"]
    env = {**os.environ, "TMPDIR": str(tmp)}
    proc = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    workers: list[int] = []
    try:
        assert gate.arrived.wait(WAIT_S), "the batch never reached the model"
        workers = _children(proc.pid)
        assert workers, "the batch runs no worker process"
        proc.send_signal(signal.SIGKILL)
        assert proc.wait(WAIT_S) == -signal.SIGKILL
        # Orphaned workers see their task pipe close, cancel their runs and exit.
        _wait_until(lambda: all(_gone(pid) for pid in workers), "the orphaned workers to exit")
    finally:
        gate.release.set()
        workers += _children(proc.pid) if proc.poll() is None else []
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for pid in workers:  # only if the test failed: leave no process behind
            if not _gone(pid):
                os.kill(pid, signal.SIGKILL)
    assert sorted(p.name for p in tmp.iterdir()) == []
    # Nothing hidden next to the results either: only the results file and
    # the runs' journals, which a batch run again goes on from.
    assert sorted(p.name for p in out.parent.iterdir()) == [out.name, out.name + ".journals"]
