"""The SQLite store (stdlib sqlite3, WAL): the service's default, one file
in its state directory.

Durability per policy: `every` commits with synchronous=FULL (the WAL is
fsynced at each commit); `send` commits with synchronous=NORMAL (a crash of
the process loses nothing committed; a power cut may lose the last commits)
and `sync()` makes one FULL commit, which fsyncs the WAL and with it every
commit before; `none` runs with synchronous=OFF. SQLite has no advisory
locks: a writer holds an flock on a lock file of its journal beside the
database.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

from spearpy.journal._lock import LockFile
from spearpy.journal.errors import JournalError
from spearpy.journal.sqlstore import SQLJournalStore
from spearpy.journal.store import DEFAULT_MAX_JOURNAL_BYTES, SyncPolicy

_SCHEMA = """
CREATE TABLE IF NOT EXISTS journal_steps (
    journal_id TEXT NOT NULL, seq INTEGER NOT NULL, kind TEXT NOT NULL, record TEXT NOT NULL,
    PRIMARY KEY (journal_id, seq)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS journals (
    id TEXT PRIMARY KEY, ended INTEGER NOT NULL, synced_seq INTEGER NOT NULL,
    created_at REAL NOT NULL);
"""
_SYNCHRONOUS = {SyncPolicy.EVERY: "FULL", SyncPolicy.SEND: "NORMAL", SyncPolicy.NONE: "OFF"}
BUSY_TIMEOUT_S = 10.0


class SQLiteJournalStore(SQLJournalStore):
    _ERRORS = (sqlite3.Error,)

    def __init__(self, path: str | os.PathLike[str], *,
                 max_record_bytes: int = DEFAULT_MAX_JOURNAL_BYTES) -> None:
        super().__init__(max_record_bytes=max_record_bytes)
        self.path = Path(path)
        self._locks = self.path.with_name(self.path.name + ".locks")
        try:
            self._locks.mkdir(mode=0o700, parents=True, exist_ok=True)
        except OSError as exc:
            raise JournalError(f"cannot create {str(self._locks)!r}: {exc.strerror}") from exc
        self._prepare()

    def _create_tables(self, conn: Any) -> None:
        conn.executescript(_SCHEMA)

    def _connect(self, sync: SyncPolicy | None) -> Any:
        try:
            _create_private(self.path)
            conn = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_S, isolation_level=None,
                                   check_same_thread=False)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute(f"PRAGMA synchronous={_SYNCHRONOUS[sync or SyncPolicy.SEND]}")
        except (sqlite3.Error, OSError) as exc:
            raise JournalError(f"journal store {str(self.path)!r}: {exc}") from exc
        return conn

    def _lock(self, conn: Any, journal_id: str) -> Callable[[], None]:
        # Hashed: ids may differ only in case, and the file system may not.
        name = hashlib.sha256(journal_id.encode()).hexdigest()[:32]
        return LockFile(self._locks / f"{name}.lock", f"journal {journal_id!r}").release

    def _durable(self, conn: Any, journal_id: str, seq: int) -> None:
        self._query(conn, "PRAGMA synchronous=FULL")
        try:
            self._query(conn, "UPDATE {journals} SET synced_seq = ? WHERE id = ?",
                        (seq, journal_id))
        finally:
            self._query(conn, "PRAGMA synchronous=NORMAL")


def _create_private(path: Path) -> None:
    """Create the database file 0600 (SQLite gives its -wal and -shm the
    same: the journals hold the runs' conversations), only if it is new.
    Closing a descriptor of a file drops every POSIX lock this process holds
    on it: opening an existing database here would take the locks of this
    process's other connections (a run's writer) away, and another process
    could then reset the WAL under them, losing what they append next."""
    if path.exists():
        return
    with contextlib.suppress(FileExistsError):  # created meanwhile: not opened here
        os.close(os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600))
