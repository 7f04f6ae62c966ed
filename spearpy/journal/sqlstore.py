"""What the SQLite and PostgreSQL stores share: two tables, the same queries.

```
<steps>    (journal_id, seq) primary key, kind, record   one row per record
<journals> id primary key, ended, synced_seq, created_at
```

Each append is its own transaction (an end record's also marks the journal
ended), so a crash leaves whole records only. Reads are keyset pages: the
lengths of the next PAGE_RECORDS rows first, then the rows that fit in
PAGE_BYTES, so no page, however large its records, is read whole.
"""

from __future__ import annotations

import contextlib
import threading
import time
from abc import abstractmethod
from collections.abc import Callable, Iterator
from typing import Any

from spearpy.journal.errors import JournalCorrupt, JournalError
from spearpy.journal.records import END, Record
from spearpy.journal.store import (
    DEFAULT_MAX_JOURNAL_BYTES,
    PAGE_BYTES,
    PAGE_RECORDS,
    JournalInfo,
    JournalStore,
    StoreWriter,
    SyncPolicy,
    check_id,
)


class SQLJournalStore(JournalStore):
    """A store on a DB-API connection in autocommit mode; subclasses connect,
    lock and make commits durable in their database's way."""

    STEPS = "journal_steps"
    JOURNALS = "journals"
    _MARK = "?"  # the driver's parameter marker
    _ERRORS: tuple[type[BaseException], ...] = ()

    def __init__(self, *, max_record_bytes: int = DEFAULT_MAX_JOURNAL_BYTES) -> None:
        super().__init__(max_record_bytes=max_record_bytes)
        self._reader_lock = threading.Lock()
        self._reader: Any = None

    # ---- what a database does its own way ----------------------------------------

    @abstractmethod
    def _connect(self, sync: SyncPolicy | None) -> Any:
        """An autocommit connection; `sync` sets a writer's durability, None a reader's."""

    @abstractmethod
    def _create_tables(self, conn: Any) -> None:
        """Create the two tables unless they exist."""

    @abstractmethod
    def _lock(self, conn: Any, journal_id: str) -> Callable[[], None]:
        """Take the journal's writer lock (JournalBusy if held); returns its release."""

    @abstractmethod
    def _durable(self, conn: Any, journal_id: str, seq: int) -> None:
        """Record `seq` as synced in a commit that makes every earlier one durable."""

    # ---- shared ---------------------------------------------------------------------

    def _prepare(self) -> None:
        """The tables, before the store is used (subclasses call it once connectable)."""
        conn = self._connect(None)
        try:
            self._create_tables(conn)
        except self._ERRORS as exc:
            raise JournalError(f"journal store: cannot create its tables: {exc}") from exc
        finally:
            conn.close()

    def _query(self, conn: Any, sql: str, params: tuple[Any, ...] = ()) -> list[Any]:
        sql = sql.format(steps=self.STEPS, journals=self.JOURNALS).replace("?", self._MARK)
        try:
            cursor = conn.execute(sql, params)
            return list(cursor.fetchall()) if cursor.description else []
        except self._ERRORS as exc:
            raise JournalError(f"journal store: {type(exc).__name__}: {exc}") from exc

    @contextlib.contextmanager
    def _transaction(self, conn: Any) -> Iterator[None]:
        self._query(conn, "BEGIN")
        try:
            yield
        except BaseException:
            self._query(conn, "ROLLBACK")
            raise
        self._query(conn, "COMMIT")

    def _read(self, sql: str, params: tuple[Any, ...]) -> list[Any]:
        with self._reader_lock:
            if self._reader is None:
                self._reader = self._connect(None)
            return self._query(self._reader, sql, params)

    def open_writer(self, journal_id: str, *, sync: SyncPolicy = SyncPolicy.SEND,
                    validate: bool = True) -> StoreWriter:
        # Rows are whole and numbered by the database: counting them is
        # validation enough to append after them (records() checks each).
        check_id(journal_id)
        conn = self._connect(sync)
        try:
            release = self._lock(conn, journal_id)
        except BaseException:
            conn.close()
            raise
        try:
            self._query(conn, "INSERT INTO {journals} (id, ended, synced_seq, created_at) "
                              "VALUES (?, 0, -1, ?) ON CONFLICT (id) DO NOTHING",
                        (journal_id, time.time()))
            [(count, size, last)] = self._query(
                conn, "SELECT count(*), coalesce(sum(length(record)), 0), max(seq) "
                      "FROM {steps} WHERE journal_id = ?", (journal_id,))
            [(ended,)] = self._query(conn, "SELECT ended FROM {journals} WHERE id = ?",
                                     (journal_id,))
            if count and int(last) != int(count) - 1:
                raise JournalCorrupt(f"journal {journal_id!r} holds {count} records but "
                                     f"its last is step {last}: steps are missing")
        except BaseException:
            release()
            conn.close()
            raise
        return _SQLWriter(self, conn, release, sync, journal_id, int(count),
                          int(size) + int(count), bool(ended))

    def list(self) -> list[JournalInfo]:
        return [JournalInfo(str(i), bool(e))
                for i, e in self._read("SELECT id, ended FROM {journals} ORDER BY id", ())]

    def info(self, journal_id: str) -> JournalInfo | None:
        rows = self._read("SELECT id, ended FROM {journals} WHERE id = ?", (journal_id,))
        return JournalInfo(str(rows[0][0]), bool(rows[0][1])) if rows else None

    def last_record(self, journal_id: str) -> Record | None:
        check_id(journal_id)
        rows = self._read("SELECT seq, length(record) FROM {steps} WHERE journal_id = ? "
                          "ORDER BY seq DESC LIMIT 1", (journal_id,))
        if not rows:
            if not self._read("SELECT 1 FROM {journals} WHERE id = ?", (journal_id,)):
                raise JournalError(f"no journal {journal_id!r} in the store")
            return None
        seq, length = rows[0]
        if length > self.max_record_bytes:
            raise JournalCorrupt(f"journal {journal_id!r} step {seq} is longer than "
                                 f"a record may be ({self.max_record_bytes} bytes)")
        [(record,)] = self._read("SELECT record FROM {steps} WHERE journal_id = ? AND seq = ?",
                                 (journal_id, seq))
        return self._decoded(journal_id, f"step {seq}",
                             str(record).encode("utf-8", "surrogateescape"))

    def _lines(self, journal_id: str, after: int = -1) -> Iterator[tuple[str, bytes]]:
        first = True
        while True:
            sizes = self._read("SELECT seq, length(record) FROM {steps} WHERE journal_id = ? "
                               "AND seq > ? ORDER BY seq LIMIT ?",
                               (journal_id, after, PAGE_RECORDS))
            if not sizes:
                if first and not self._read("SELECT 1 FROM {journals} WHERE id = ?",
                                            (journal_id,)):
                    raise JournalError(f"no journal {journal_id!r} in the store")
                return
            first = False
            upto, total = after, 0
            for seq, length in sizes:
                if length > self.max_record_bytes:
                    raise JournalCorrupt(f"journal {journal_id!r} step {seq} is longer than "
                                         f"a record may be ({self.max_record_bytes} bytes)")
                if total and total + length > PAGE_BYTES:
                    break
                upto, total = int(seq), total + int(length)
            rows = self._read("SELECT seq, record FROM {steps} WHERE journal_id = ? "
                              "AND seq > ? AND seq <= ? ORDER BY seq", (journal_id, after, upto))
            for seq, record in rows:
                yield f"step {seq}", str(record).encode("utf-8", "surrogateescape")
            after = upto

    def close(self) -> None:
        with self._reader_lock:
            reader, self._reader = self._reader, None
        if reader is not None:
            reader.close()


class _SQLWriter(StoreWriter):
    def __init__(self, store: SQLJournalStore, conn: Any, release: Callable[[], None],
                 sync: SyncPolicy, journal_id: str, count: int, size: int,
                 ended: bool) -> None:
        super().__init__(journal_id, count, size, ended)
        self._store = store
        self._conn: Any = conn
        self._release = release
        self._sync = sync

    def append(self, seq: int, kind: str, line: bytes) -> None:
        conn = self._open_conn()
        query = self._store._query
        insert = "INSERT INTO {steps} (journal_id, seq, kind, record) VALUES (?, ?, ?, ?)"
        params = (self.journal_id, seq, kind, line.decode("ascii"))
        if kind != END:
            query(conn, insert, params)
        else:
            with self._store._transaction(conn):
                query(conn, insert, params)
                query(conn, "UPDATE {journals} SET ended = 1 WHERE id = ?", (self.journal_id,))
            self.ended = True
        self.bytes_used += len(line) + 1
        self.next_seq = seq + 1

    def sync(self) -> None:
        if self._sync is SyncPolicy.SEND and self.next_seq:
            self._store._durable(self._open_conn(), self.journal_id, self.next_seq - 1)

    def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                self._release()
            finally:
                conn.close()

    def _open_conn(self) -> Any:
        if self._conn is None:
            raise JournalError(f"journal {self.journal_id!r} is closed")
        return self._conn
