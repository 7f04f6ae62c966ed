"""Journal stores shared by the runs of one process.

`JournalSpec.locate()` opens its store afresh for every run: for SQLite
that is a directory check, three connections (tables, the existence check,
the writer) and the schema script, ~0.4 ms of a short run's ~1.3 ms (bench
`SV`, where every run of the service is journaled). A `SharedJournalSpec`
locates its store in a per-process table instead: the runs of a service,
or of one of its worker processes, share a store (its read connection, its
checked tables); each run still gets a writer connection and lock of its
own. It pickles as a plain spec does, and a worker process shares its
stores among its own runs.

A shared store is never closed by a run (`read_start` closes only its read
connection, which the next read opens again). It is opened again when its
database file is no longer the one it opened (removed, replaced). A store
that leaves the table (replaced, or past `_MAX_STORES`) is retired: its
shared writer connection closes when the last run writing through it
closes its writer, so a long-running service keeps no descriptor per
database it ever journaled to.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from spearpy.durable import JournalSpec
from spearpy.journal import JournalStore, SyncPolicy
from spearpy.journal.sqlite import SQLiteJournalStore

_PREFIX = "sqlite:"
_MAX_STORES = 8  # distinct databases kept open per process; the oldest is closed past it
_lock = threading.Lock()
_stores: OrderedDict[str, tuple[tuple[int, int], _SharedWriterStore]] = OrderedDict()


@dataclass(frozen=True, slots=True)
class SharedJournalSpec(JournalSpec):
    """A JournalSpec whose SQLite store is this process's shared one."""

    def locate(self) -> tuple[JournalStore, str]:
        text = os.fspath(self.path)
        if not text.startswith(_PREFIX) or self.journal_id is None:
            return JournalSpec.locate(self)
        return shared_store(text), self.journal_id


def shared_spec(store: str, journal_id: str, sync: SyncPolicy) -> SharedJournalSpec:
    return SharedJournalSpec(store, journal_id=journal_id, sync=sync)


def shared_store(spec: str) -> JournalStore:
    """The store `spec` (`sqlite:PATH`) names, opened once per process."""
    path = spec[len(_PREFIX):]
    with _lock:
        entry = _stores.get(spec)
        if entry is not None and entry[0] == _identity(path):
            _stores.move_to_end(spec)
            return entry[1]
    store = _SharedWriterStore(path)  # outside the lock: it creates the file and its tables
    identity = _identity(path)
    with _lock:
        old = _stores.pop(spec, None)
        _stores[spec] = (identity, store)
        evicted = [old[1]] if old is not None else []
        while len(_stores) > _MAX_STORES:
            evicted.append(_stores.popitem(last=False)[1][1])
    for gone in evicted:
        gone.retire()
    return store


def _identity(path: str) -> tuple[int, int]:
    try:
        stat = os.stat(path)
    except OSError:
        return (-1, -1)
    return (stat.st_dev, stat.st_ino)


class _SharedWriterStore(SQLiteJournalStore):
    """The SQLite store whose `none`-policy writers (the service's) share one
    connection. With one connection per run, the 64 runs of a burst each
    wanted SQLite's write lock for every record they appended, and one that
    found it taken slept in SQLite's busy handler (1, 2, 5, 10... ms) while
    its run waited. One connection takes each record in turn, and holds no
    lock between them. Writers of the other policies, whose durable commits
    change the connection's `synchronous`, keep connections of their own."""

    def __init__(self, path: str) -> None:
        super().__init__(path)
        self._shared: _SerialConnection | None = None
        self._shared_lock = threading.Lock()
        self._users = 0  # writers holding the shared connection (each closes it once)
        self._retired = False

    def _connect(self, sync: SyncPolicy | None) -> Any:
        if sync is not SyncPolicy.NONE:
            return super()._connect(sync)
        with self._shared_lock:
            if self._shared is None:
                self._shared = _SerialConnection(super()._connect(sync), self._release)
            self._users += 1
            return self._shared

    def _release(self) -> None:
        with self._shared_lock:
            self._users -= 1
            self._close_unused()

    def _read(self, sql: str, params: tuple[Any, ...]) -> list[Any]:
        try:
            return super()._read(sql, params)
        finally:
            if self._retired:
                self.close()  # no one closes a retired store's reader again

    def retire(self) -> None:
        """Out of the process's table: close what no run uses now, and the
        shared connection when its last writer closes. A run that located
        the store before still reads and writes through it (it opens a
        connection again if need be, closed again after it)."""
        with self._shared_lock:
            self._retired = True
            self._close_unused()
        self.close()  # the read connection, after the flag: a read now closes its own

    def _close_unused(self) -> None:
        # Under _shared_lock. No user: no statement of theirs is in flight.
        if self._retired and self._users == 0 and self._shared is not None:
            shared, self._shared = self._shared, None
            shared.close_shared()


class _SerialConnection:
    """A connection that writers on many threads share, one statement at a
    time: a transaction (BEGIN to COMMIT or ROLLBACK) holds it throughout,
    so no other writer's statement lands inside it, and a statement's rows
    are read before the next one runs. A writer's `close()` only tells its
    store (`release`): the connection stays open for the others, and closes
    once its store is retired and no writer holds it."""

    def __init__(self, conn: sqlite3.Connection, release: Callable[[], None]) -> None:
        self._conn = conn
        self._release = release
        self._lock = threading.RLock()
        self._owner: int | None = None  # the thread inside an explicit transaction
        self._ops: list[_Op] = []  # statements waiting for the next group commit
        self._ops_lock = threading.Lock()

    def execute(self, sql: str, params: Any = ()) -> _Rows:
        verb = sql.strip().upper()
        if verb.startswith("BEGIN"):
            self._lock.acquire()  # held until the transaction's end
            try:
                rows = self._run(sql, params)
            except BaseException:
                self._lock.release()
                raise
            self._owner = threading.get_ident()
            return rows
        if verb in ("COMMIT", "ROLLBACK", "END"):
            try:
                return self._run(sql, params)
            finally:
                if verb != "ROLLBACK" and self._conn.in_transaction:
                    # A refused COMMIT leaves its transaction open on the shared
                    # connection: end it here, or the next writer's records
                    # would join it.
                    with contextlib.suppress(sqlite3.Error):
                        self._conn.execute("ROLLBACK")
                self._owner = None
                self._lock.release()
        if self._owner == threading.get_ident():
            with self._lock:  # inside this thread's own transaction
                return self._run(sql, params)
        return self._grouped(_Op(sql, params))

    def _grouped(self, op: _Op) -> _Rows:
        """An autocommit statement, committed with those of other writers
        that wait meanwhile (group commit): each returns, as alone, once its
        statement is committed, and fails alone if it fails; a commit the
        disk refuses fails them all, as it would have each. Fewer commits
        is fewer of SQLite's lock calls and WAL writes, which 64 writers
        each paid per record."""
        with self._ops_lock:
            self._ops.append(op)
        with self._lock:
            if not op.done:
                with self._ops_lock:
                    ops, self._ops = self._ops, []
                self._commit_group(ops)
        if op.error is not None:
            raise op.error
        assert op.rows is not None
        return op.rows

    def _commit_group(self, ops: list[_Op]) -> None:
        try:
            if len(ops) == 1:
                ops[0].run(self._run)
                return
            # IMMEDIATE: the write lock now, waiting in the busy handler.
            # A deferred transaction that read first (a writer's opening
            # SELECTs) and then wrote would fail at once, not wait, if
            # another process (a worker, the service) wrote in between.
            self._conn.execute("BEGIN IMMEDIATE")
            for op in ops:
                op.run(self._run)
                if not self._conn.in_transaction:
                    # The error rolled the whole transaction back (disk full,
                    # I/O): none of the group is stored.
                    raise op.error or sqlite3.OperationalError("rolled back")
            self._conn.execute("COMMIT")
        except BaseException as exc:
            if self._conn.in_transaction:
                with contextlib.suppress(sqlite3.Error):
                    self._conn.execute("ROLLBACK")
            for op in ops:
                op.rows, op.error = None, exc if isinstance(exc, Exception) else \
                    sqlite3.OperationalError(f"interrupted: {exc!r}")
            if not isinstance(exc, Exception):
                raise
        finally:
            for op in ops:
                op.done = True

    def _run(self, sql: str, params: Any) -> _Rows:
        cursor = self._conn.execute(sql, params)
        description = cursor.description
        return _Rows(description, cursor.fetchall() if description else [])

    def executemany(self, sql: str, params: Any) -> _Rows:
        with self._lock:
            self._conn.executemany(sql, params)
            return _Rows(None, [])

    @property
    def in_transaction(self) -> bool:
        return self._conn.in_transaction

    def close(self) -> None:
        self._release()

    def close_shared(self) -> None:
        self._conn.close()


class _Op:
    """One statement waiting for a group commit, and what came of it."""

    __slots__ = ("done", "error", "params", "rows", "sql")

    def __init__(self, sql: str, params: Any) -> None:
        self.sql = sql
        self.params = params
        self.rows: _Rows | None = None
        self.error: Exception | None = None
        self.done = False

    def run(self, run: Callable[[str, Any], _Rows]) -> None:
        try:
            self.rows = run(self.sql, self.params)
        except sqlite3.Error as exc:  # this statement alone: the others go on
            self.error = exc


class _Rows:
    """What a statement on a shared connection returned, read whole."""

    def __init__(self, description: Any, rows: list[Any]) -> None:
        self.description = description
        self._rows = rows

    def fetchall(self) -> list[Any]:
        return self._rows

    def fetchone(self) -> Any:
        return self._rows[0] if self._rows else None
