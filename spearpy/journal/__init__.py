"""Durable runs' journals (issue 31): the record format and the stores.

A journal holds, in order, a run's start (step 0), every answer the guest
observed from the outside world, and its end (records.py); it is written by a
JournalWriter (scrubbed, bounded), kept by a JournalStore (a JSON Lines file,
SQLite or PostgreSQL) and served back to a replay by a JournalReader, which
stops with ReplayDiverged at the first step the guest asks differently.
This room sits low: it imports leaves only, never the run core.
"""

from __future__ import annotations

import os

from spearpy.journal.errors import (
    JournalBusy,
    JournalCorrupt,
    JournalError,
    JournalFull,
    ReplayDiverged,
)
from spearpy.journal.filestore import FileJournalStore
from spearpy.journal.reader import JournalReader
from spearpy.journal.records import KINDS, End, Kind, Record, Start, Step, decode, encode
from spearpy.journal.sqlite import SQLiteJournalStore
from spearpy.journal.store import (
    DEFAULT_MAX_JOURNAL_BYTES,
    JournalInfo,
    JournalStore,
    SyncPolicy,
)
from spearpy.journal.writer import JournalWriter

__all__ = [
    "DEFAULT_MAX_JOURNAL_BYTES", "KINDS", "End", "FileJournalStore", "JournalBusy",
    "JournalCorrupt", "JournalError", "JournalFull", "JournalInfo", "JournalReader",
    "JournalStore", "JournalWriter", "Kind", "Record", "ReplayDiverged", "SQLiteJournalStore",
    "Start", "Step", "SyncPolicy", "decode", "encode", "open_store",
]


def open_store(spec: str | os.PathLike[str]) -> JournalStore:
    """The store a flag names: `postgresql://...` (or `postgres://`), `sqlite:PATH`
    or a `.sqlite3`/`.db` file, else a directory of journal files."""
    text = os.fspath(spec)
    if text.startswith(("postgresql://", "postgres://")):
        from spearpy.journal.postgres import PostgresJournalStore

        return PostgresJournalStore(text)
    if text.startswith("sqlite:"):
        return SQLiteJournalStore(text[len("sqlite:"):])
    if text.endswith((".sqlite3", ".sqlite", ".db")):
        return SQLiteJournalStore(text)
    return FileJournalStore(text.removeprefix("file:"))
