"""The PostgreSQL store, for several hosts sharing state (a run resumes on
another machine). Needs the `postgres` extra (psycopg 3), imported only here.

A writer holds a session advisory lock on its journal id
(pg_try_advisory_lock on hashtextextended(id)): the server drops it when the
writer's connection ends, crash included. Durability per policy: `every`
commits with synchronous_commit=on; `send` and `none` commit with it off (a
crash of the server may lose the last commits, never tear one), and `send`'s
`sync()` makes one synchronous commit, which flushes the WAL up to it and so
every commit before.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from spearpy.journal.errors import JournalBusy, JournalError
from spearpy.journal.sqlstore import SQLJournalStore
from spearpy.journal.store import DEFAULT_MAX_JOURNAL_BYTES, SyncPolicy

try:
    import psycopg
except ImportError as exc:  # pragma: no cover - depends on the install
    raise JournalError("the PostgreSQL journal store needs psycopg: "
                       "pip install 'spearpy[postgres]'") from exc

_SCHEMA = """
CREATE TABLE IF NOT EXISTS spearpy_journal_steps (
    journal_id text NOT NULL, seq bigint NOT NULL, kind text NOT NULL, record text NOT NULL,
    PRIMARY KEY (journal_id, seq));
CREATE TABLE IF NOT EXISTS spearpy_journals (
    id text PRIMARY KEY, ended smallint NOT NULL, synced_seq bigint NOT NULL,
    created_at double precision NOT NULL);
"""
# Two hosts creating the tables at once would collide in the catalog.
_SCHEMA_LOCK = 0x5350_4541_524A_4E4C  # "SPEARJNL"
CONNECT_TIMEOUT_S = 10


class PostgresJournalStore(SQLJournalStore):
    STEPS = "spearpy_journal_steps"
    JOURNALS = "spearpy_journals"
    _MARK = "%s"
    _ERRORS = (psycopg.Error,)

    def __init__(self, conninfo: str, *,
                 max_record_bytes: int = DEFAULT_MAX_JOURNAL_BYTES) -> None:
        super().__init__(max_record_bytes=max_record_bytes)
        self._conninfo = conninfo  # may hold a password: never in a message
        self._prepare()

    def _create_tables(self, conn: Any) -> None:
        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (_SCHEMA_LOCK,))
            conn.execute(_SCHEMA)

    def _connect(self, sync: SyncPolicy | None) -> Any:
        try:
            conn = psycopg.connect(self._conninfo, autocommit=True,
                                   connect_timeout=CONNECT_TIMEOUT_S)
        except psycopg.Error as exc:
            raise JournalError(f"journal store: cannot connect to PostgreSQL: {exc}") from exc
        if sync is not None:
            self._query(conn, "SELECT set_config('synchronous_commit', ?, false)",
                        ("on" if sync is SyncPolicy.EVERY else "off",))
        return conn

    def _lock(self, conn: Any, journal_id: str) -> Callable[[], None]:
        [(taken,)] = self._query(conn, "SELECT pg_try_advisory_lock(hashtextextended(?, 0))",
                                 (journal_id,))
        if not taken:
            raise JournalBusy(f"journal {journal_id!r} is open for writing elsewhere (another "
                              f"run or host holds its lock); two writers would interleave")
        return lambda: None  # released with the connection, which the writer closes

    def _durable(self, conn: Any, journal_id: str, seq: int) -> None:
        with self._transaction(conn):
            self._query(conn, "SET LOCAL synchronous_commit = on")
            self._query(conn, "UPDATE {journals} SET synced_seq = ? WHERE id = ?",
                        (seq, journal_id))
