"""Every file spearpy reads back after a crash, damaged each way apart: a torn
tail alone (the writer died mid-write), a corrupt middle alone (damaged
blocks, a stray write), and both. One repair must not hide another's absence,
so no case plants two kinds of damage unless it is the "both" case.

Files: the batch results journal, the compile cache (.cwasm), transcripts
(`spearpy show` reads them) and the service's SQLite store (its WAL).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from spearpy.batch.jobs import BatchInput, result_record
from spearpy.batch.journal import open_results
from spearpy.observe.transcripts import TranscriptWriter
from spearpy.outcome import RunResult
from spearpy.serve.store import RunStore
from spearpy.show import TranscriptNotFound, find, load

ROOT = Path(__file__).resolve().parent.parent
DAMAGE = ["torn_tail", "corrupt_middle", "both"]


def _torn(data: bytes, cut: int) -> bytes:
    return data[:-cut]


def _corrupt(data: bytes, at: int, length: int = 64) -> bytes:
    damaged = bytearray(data)
    for i in range(at, min(at + length, len(damaged))):
        damaged[i] ^= 0xA5
    return bytes(damaged)


# ---- the batch results journal ----------------------------------------------------------

def _record(ident: str) -> dict[str, object]:
    return result_record(BatchInput(index=0, line=1, id=ident),
                         RunResult("r", 0, "exited", stdout=b"ok", stderr=b""), 1)


@pytest.mark.parametrize("damage", DAMAGE)
def test_results_journal(tmp_path: Path, damage: str) -> None:
    out = tmp_path / "out.jsonl"
    with open_results(out) as results:
        for ident in ("a", "m", "z"):
            results.write(_record(ident))
    lines = out.read_bytes().splitlines(keepends=True)
    kept = {"a", "m", "z"}
    if damage in ("corrupt_middle", "both"):
        lines[1] = b'{"id": "m", "outcome": \xff\xfe garbage\n'
        kept.discard("m")
    data = b"".join(lines)
    if damage in ("torn_tail", "both"):
        data += b'{"id":"b","o'  # the writer died mid-line
    out.write_bytes(data)

    with open_results(out) as results:
        assert results.done == {f'"{k}"' for k in kept}
        results.write(_record("b"))
    # Every line parses and "b" is done: a resume does not redo it.
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert sorted(r["id"] for r in records) == sorted([*kept, "b"])
    with open_results(out) as again:
        assert '"b"' in again.done


# ---- the compile cache ------------------------------------------------------------------

_LOAD_AND_RUN = textwrap.dedent("""
    import sys
    from pathlib import Path
    from spearpy.host import Host
    wasm = Path(sys.argv[2]).read_bytes()
    with Host(cache_dir=Path(sys.argv[1]), model="m", base_url="http://127.0.0.1:9/v1") as host:
        loaded = host.load(wasm)
        result = host.run(loaded, ["x"])
        print(loaded.from_disk_cache, result.outcome, result.exit_code)
""")


def _load_and_run(cache: Path, wasm: Path) -> str:
    """In a child: a damaged cache once segfaulted the process."""
    done = subprocess.run([sys.executable, "-c", _LOAD_AND_RUN, str(cache), str(wasm)],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 0, f"exit {done.returncode}: {done.stderr[-2000:]}"
    return done.stdout.strip()


@pytest.mark.parametrize("damage", DAMAGE)
def test_compile_cache(tmp_path: Path, damage: str) -> None:
    wasm = ROOT / "wasm-samples" / "c_hello.wasm"
    assert _load_and_run(tmp_path, wasm) == "False exited 0"
    (cached,) = (tmp_path / "modules").glob("*.cwasm")
    good = cached.read_bytes()
    data = good
    if damage in ("corrupt_middle", "both"):
        data = _corrupt(data, len(good) // 3)
    if damage in ("torn_tail", "both"):
        data = _torn(data, len(good) // 4)
    cached.write_bytes(data)
    # Damaged: compiled again (not read), the run unharmed, the file rewritten.
    assert _load_and_run(tmp_path, wasm) == "False exited 0"
    assert cached.read_bytes() == good
    assert _load_and_run(tmp_path, wasm) == "True exited 0"


# ---- transcripts ------------------------------------------------------------------------

def _transcripts(directory: Path) -> Path:
    writer = TranscriptWriter(directory)
    for fd in (1000, 1001):
        writer.write({"run_id": "run1", "session_fd": fd,
                      "messages": [{"role": "user", "content": "hello " * 50}]})
    return directory / "run1-fd1000.json"


@pytest.mark.parametrize("damage", DAMAGE)
def test_transcripts(tmp_path: Path, damage: str) -> None:
    path = _transcripts(tmp_path)
    good = path.read_bytes()
    # A writer killed mid-write leaves its temporary file, never half a
    # transcript under the real name (atomic_write): the reader skips it.
    (tmp_path / ".run1-fd1002.json.4242.1.tmp").write_bytes(good[:40])
    assert [p.name for p in find("run1", tmp_path)] == ["run1-fd1000.json", "run1-fd1001.json"]
    data = good
    if damage in ("corrupt_middle", "both"):
        data = _corrupt(data, len(good) // 2, 8)
    if damage in ("torn_tail", "both"):
        data = _torn(data, 10)
    path.write_bytes(data)
    # Damaged by something else: a clear error naming the file, the other
    # session untouched.
    with pytest.raises(TranscriptNotFound, match=r"run1-fd1000\.json is not a transcript"):
        load(path)
    assert load(tmp_path / "run1-fd1001.json")["messages"][0]["role"] == "user"


# ---- the service's store ----------------------------------------------------------------

def _row(run_id: str) -> dict[str, Any]:
    return {"id": run_id, "created_at": time.time(), "status": "running", "module": "m.wasm",
            "request": {"module": "m"}}


def _crashed_store(tmp_path: Path, runs: int) -> Path:
    """A state directory as a killed service leaves it: the WAL holds every
    commit (copied while the store is open, so nothing is checkpointed)."""
    live, crashed = tmp_path / "live", tmp_path / "crashed"
    store = RunStore(live)
    try:
        for i in range(runs):
            store.insert_run(_row(f"run{i}")).result(timeout=30)
        crashed.mkdir()
        for name in ("runs.sqlite3", "runs.sqlite3-wal"):
            shutil.copy(live / name, crashed / name)
    finally:
        store.close()
    return crashed


@pytest.mark.parametrize("damage", DAMAGE)
def test_serve_store(tmp_path: Path, damage: str) -> None:
    state = _crashed_store(tmp_path, 6)
    wal = state / "runs.sqlite3-wal"
    data = wal.read_bytes()
    assert len(data) > 4096 * 6, "every commit is in the WAL"
    if damage in ("corrupt_middle", "both"):
        data = _corrupt(data, len(data) // 2, 256)
    if damage in ("torn_tail", "both"):
        data = _torn(data, 1000)  # half the last frame
    wal.write_bytes(data)
    store = RunStore(state)  # opens: SQLite replays the WAL up to the damage
    try:
        found = [store.get_run(f"run{i}") for i in range(6)]
        kept = [run for run in found if run is not None]
        ids = sorted(int(r["id"].removeprefix("run")) for r in kept)
        # Whole commits only, in order: a prefix of what was written.
        assert ids == list(range(len(ids)))
        assert len(ids) >= (5 if damage == "torn_tail" else 1)
        # A run left running by the killed service is marked interrupted.
        assert all(r["status"] == "interrupted" for r in kept)
        assert sorted(store.interrupted) == sorted(r["id"] for r in kept)
        store.insert_run(_row("after")).result(timeout=30)
        got = store.get_run("after")
        assert got is not None and got["status"] == "running"
    finally:
        store.close()

