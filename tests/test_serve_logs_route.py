"""`GET /v1/runs/{id}/logs` answers with the run's log lines and status
without reading its result (up to 64 MiB each of stdout and stderr, and the
transcripts): the lines are stored beside the result, not inside it. A real
service on 127.0.0.1, a real guest (WAT) that logs and prints 4 MiB."""

from __future__ import annotations

import json
import re
import sqlite3
from pathlib import Path
from typing import ClassVar

import httpx
import pytest
import wasmtime

from spearpy import HostConfig
from spearpy.serve import BackgroundServer, ServeConfig, app, create_app
from spearpy.serve.store import RunStore

_STDOUT_CHUNKS = 64  # of 64 KiB: 4 MiB of stdout
_LOGS_AND_PRINTS = f"""
(module
  (import "wasi_snapshot_preview1" "fd_write" (func $fd_write (param i32 i32 i32 i32) (result i32)))
  (import "spear" "log" (func $log (param i32 i32 i32) (result i32)))
  (memory (export "memory") 2)
  (data (i32.const 64) "kept line one")
  (data (i32.const 96) "kept line two")
  (func (export "_start")
    (local $n i32)
    (drop (call $log (i32.const 2) (i32.const 64) (i32.const 13)))
    (drop (call $log (i32.const 3) (i32.const 96) (i32.const 13)))
    (memory.fill (i32.const 65536) (i32.const 120) (i32.const 65536))
    (i32.store (i32.const 0) (i32.const 65536))
    (i32.store (i32.const 4) (i32.const 65536))
    (loop $l
      (drop (call $fd_write (i32.const 1) (i32.const 0) (i32.const 1) (i32.const 16)))
      (local.set $n (i32.add (local.get $n) (i32.const 1)))
      (br_if $l (i32.lt_u (local.get $n) (i32.const {_STDOUT_CHUNKS}))))))
"""


class TracedStore(RunStore):
    """The service's store, noting every SELECT its connections run."""

    selects: ClassVar[list[str]] = []

    def _connect(self) -> sqlite3.Connection:
        db = super()._connect()
        db.set_trace_callback(self._traced)
        return db

    @classmethod
    def _traced(cls, sql: str) -> None:
        if sql.lstrip().upper().startswith("SELECT"):
            cls.selects.append(sql)


def _reads_the_result(sql: str) -> bool:
    return re.search(r"\bFROM runs\b", sql) is not None and \
        re.search(r"\bresult\b", sql) is not None


def test_the_logs_events_and_cancel_routes_do_not_read_the_runs_output(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    mods = tmp_path / "modules"
    mods.mkdir()
    (mods / "logger.wasm").write_bytes(bytes(wasmtime.wat2wasm(_LOGS_AND_PRINTS)))
    monkeypatch.setattr(app, "RunStore", TracedStore)
    monkeypatch.setattr(TracedStore, "selects", [])
    config = ServeConfig(modules_dir=mods, state_dir=tmp_path / "state",
                         host=HostConfig(cache_dir=None))
    with BackgroundServer(create_app(config)) as server, \
            httpx.Client(base_url=server.url, timeout=60) as client:
        run = client.post("/v1/runs", json={"module": "logger", "wait": True}).json()
        assert run["outcome"] == "exited", run
        full = client.get(f"/v1/runs/{run['id']}").json()
        assert full["stdout"] == "x" * (_STDOUT_CHUNKS << 16)
        # The end is on the disk once the run's record reads finished: from
        # here on, the route reads the store.
        TracedStore.selects.clear()
        logs = client.get(f"/v1/runs/{run['id']}/logs")
        assert client.get("/v1/runs/nope/logs").status_code == 404
        # The routes that only check the run exists, or read its outcome,
        # leave its output alone too.
        events = client.get(f"/v1/runs/{run['id']}/events")
        cancel = client.delete(f"/v1/runs/{run['id']}")
    assert logs.status_code == 200, logs.text
    assert logs.json() == {"id": run["id"], "status": "finished", "dropped": 0,
                           "logs": [{"level": "info", "text": "kept line one"},
                                    {"level": "warn", "text": "kept line two"}]}
    assert events.status_code == 200 and '"outcome":"exited"' in events.text
    assert cancel.status_code == 409 and cancel.json()["outcome"] == "exited"
    assert TracedStore.selects, "the routes read nothing from the store"
    assert not [sql for sql in TracedStore.selects if _reads_the_result(sql)]


def test_a_state_directory_from_before_the_logs_column_keeps_its_runs_logs(
        tmp_path: Path) -> None:
    """Its runs' lines were inside their result: read from there (by
    SQLite) while their column is empty."""
    state = tmp_path / "state"
    state.mkdir()
    old = sqlite3.connect(state / "runs.sqlite3")
    old.executescript("""
        CREATE TABLE runs (
            id TEXT PRIMARY KEY, created_at REAL NOT NULL, ended_at REAL, status TEXT NOT NULL,
            module TEXT NOT NULL, sha256 TEXT, request TEXT NOT NULL, outcome TEXT,
            exit_code INTEGER, message TEXT, host_run_id TEXT, cancel_reason TEXT,
            result TEXT, summary TEXT);""")
    lines = [{"level": "info", "text": "from before"}]
    result = {"stdout": "x" * 1000, "logs": lines, "logs_dropped": 3}
    rows = [("ended", "finished", json.dumps(result)),
            ("bare", "finished", json.dumps({"stdout": ""})),  # from before the logs too
            ("going", "running", None)]
    old.executemany("INSERT INTO runs (id, created_at, status, module, request, result) "
                    "VALUES (?, 0, ?, 'm', '{}', ?)", rows)
    old.commit()
    old.close()
    store = RunStore(state)
    try:
        assert store.get_logs("ended") == {"id": "ended", "status": "finished",
                                           "logs": {"logs": lines, "dropped": 3}}
        assert store.get_logs("bare") == {"id": "bare", "status": "finished",
                                          "logs": {"logs": [], "dropped": 0}}
        # A dead service's run is marked interrupted as the store opens; no end, no lines.
        assert store.get_logs("going") == {"id": "going", "status": "interrupted", "logs": None}
        assert store.get_logs("missing") is None
    finally:
        store.close()


def test_opening_a_state_directory_from_before_the_column_rewrites_no_run(
        tmp_path: Path) -> None:
    """The column is added, not filled: filling it rewrote every row, the
    result's overflow pages with it, in one transaction (the state
    directory's size again in its WAL, and that long to start)."""
    state = tmp_path / "state"
    state.mkdir()
    old = sqlite3.connect(state / "runs.sqlite3")
    old.execute("PRAGMA journal_mode=WAL")
    old.execute("""
        CREATE TABLE runs (
            id TEXT PRIMARY KEY, created_at REAL NOT NULL, ended_at REAL, status TEXT NOT NULL,
            module TEXT NOT NULL, sha256 TEXT, request TEXT NOT NULL, outcome TEXT,
            exit_code INTEGER, message TEXT, host_run_id TEXT, cancel_reason TEXT,
            result TEXT, summary TEXT)""")
    lines = [{"level": "info", "text": "from before"}]
    result = {"stdout": "x" * (4 << 20), "logs": lines, "logs_dropped": 1}
    old.execute("INSERT INTO runs (id, created_at, status, module, request, result) "
                "VALUES ('big', 0, 'finished', 'm', '{}', ?)", (json.dumps(result),))
    old.commit()
    old.close()  # its last connection: the WAL is checkpointed and removed
    store = RunStore(state)
    try:
        wal = state / "runs.sqlite3-wal"
        assert not wal.exists() or wal.stat().st_size < 1 << 20
        assert store.get_logs("big") == {"id": "big", "status": "finished",
                                         "logs": {"logs": lines, "dropped": 1}}
    finally:
        store.close()


def test_a_run_an_older_spearpy_ended_beside_the_column_keeps_its_logs(
        tmp_path: Path) -> None:
    """A state directory the column was added to, then opened by an older
    spearpy again (a rollback): the runs that one ended hold their lines in
    their result, the column empty. Opened by this one again, they show."""
    state = tmp_path / "state"
    RunStore(state).close()  # the tables, with the column
    lines = [{"level": "warn", "text": "after a rollback"}]
    older = sqlite3.connect(state / "runs.sqlite3")
    older.execute("INSERT INTO runs (id, created_at, status, module, request, result) "
                  "VALUES ('rolled', 0, 'finished', 'm', '{}', ?)",
                  (json.dumps({"stdout": "", "logs": lines, "logs_dropped": 0}),))
    older.commit()
    older.close()
    store = RunStore(state)
    try:
        assert store.get_logs("rolled") == {"id": "rolled", "status": "finished",
                                            "logs": {"logs": lines, "dropped": 0}}
    finally:
        store.close()
