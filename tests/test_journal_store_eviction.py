"""A shared SQLite journal store that leaves the process's table (more
databases than it keeps, or its file replaced) closes its shared writer
connection once no run writes through it: a long-running service must not
keep a descriptor per database it ever journaled to."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

from spearpy.executors.journals import shared_spec, shared_store
from spearpy.journal import SyncPolicy


def _open_fds(db: Path, *, deleted: bool = False) -> int:
    """This process's descriptors on the database, its WAL or its shm (or,
    `deleted`, on those files once removed)."""
    names = {f"{name} (deleted)" if deleted else name
             for name in (str(db), f"{db}-wal", f"{db}-shm")}
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:  # the listing's own descriptor, closed meanwhile
            continue
        count += target in names
    return count


def _evict_all_but_new(tmp_path: Path) -> None:
    """Open more fresh databases than the table keeps: every store opened
    before is evicted."""
    for index in range(9):
        shared_store(f"sqlite:{tmp_path / f'other{index}.sqlite3'}")


def _write(store_spec: str, journal_id: str, seqs: range) -> None:
    store, _ = shared_spec(store_spec, journal_id, SyncPolicy.NONE).locate()
    writer = store.open_writer(journal_id, sync=SyncPolicy.NONE)
    try:
        for seq in seqs:
            writer.append(seq, "step", b'{"n":%d}' % seq)
    finally:
        writer.close()


def _steps(db: Path) -> list[tuple[str, int]]:
    check = sqlite3.connect(db)
    try:
        rows = check.execute("SELECT journal_id, seq FROM journal_steps ORDER BY journal_id, seq")
        return [(str(i), int(s)) for i, s in rows.fetchall()]
    finally:
        check.close()


def test_an_evicted_store_closes_its_shared_connection(tmp_path: Path) -> None:
    db = tmp_path / "done.sqlite3"
    _write(f"sqlite:{db}", "a", range(3))
    assert _open_fds(db) > 0  # the shared writer connection stays open for the next run
    _evict_all_but_new(tmp_path)
    assert _open_fds(db) == 0
    assert _steps(db) == [("a", 0), ("a", 1), ("a", 2)]
    # The database opens again on its next use.
    _write(f"sqlite:{db}", "b", range(1))
    assert _steps(db)[-1] == ("b", 0)


def test_a_run_writing_on_an_evicted_store_finishes_then_it_closes(tmp_path: Path) -> None:
    db = tmp_path / "live.sqlite3"
    store, _ = shared_spec(f"sqlite:{db}", "live", SyncPolicy.NONE).locate()
    writer = store.open_writer("live", sync=SyncPolicy.NONE)
    writer.append(0, "step", b'{"n":0}')
    _evict_all_but_new(tmp_path)
    # Not closed under the run: it keeps appending, and another run that
    # located the store before its eviction writes through it too.
    writer.append(1, "step", b'{"n":1}')
    late = store.open_writer("late", sync=SyncPolicy.NONE)
    late.append(0, "step", b"{}")
    late.close()
    assert _open_fds(db) > 0
    writer.append(2, "end", b"{}")
    writer.close()
    assert _open_fds(db) == 0
    assert _steps(db) == [("late", 0), ("live", 0), ("live", 1), ("live", 2)]


def test_a_replaced_database_closes_the_old_stores_connection(tmp_path: Path) -> None:
    db = tmp_path / "journals.sqlite3"
    _write(f"sqlite:{db}", "a", range(1))
    for name in os.listdir(tmp_path):
        if name.startswith("journals.sqlite3") and not name.endswith(".locks"):
            os.remove(tmp_path / name)
    shared_store(f"sqlite:{db}")  # opens the new file, evicting the old store
    assert _open_fds(db, deleted=True) == 0


def test_a_read_on_an_evicted_store_leaves_no_connection_open(tmp_path: Path) -> None:
    """A run that located the store before its eviction reads through it
    after (a resume reads its journal): that read's connection closes with
    it, not when the store object is collected."""
    db = tmp_path / "read.sqlite3"
    _write(f"sqlite:{db}", "a", range(2))
    store, _ = shared_spec(f"sqlite:{db}", "a", SyncPolicy.NONE).locate()
    _evict_all_but_new(tmp_path)
    assert _open_fds(db) == 0
    info = store.info("a")
    assert info is not None and info.id == "a"
    assert [journal.id for journal in store.list()] == ["a"]
    assert _open_fds(db) == 0
