"""JournalWriter: a run's records, scrubbed, numbered, bounded, appended to a store.

Every record goes through the scrubber cassettes use (observe/scrub.py) with
the run's secret values before it is encoded: a key a server echoes in a
completion or a tool prints is stored as `[redacted]`. Each append returns
its size, for the run to charge against max_host_bytes; past
`max_journal_bytes` an append raises JournalFull and stores nothing. The end
record, a few dozen bytes, is always written, so a full journal still says
how its run ended.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from types import TracebackType
from typing import Any

from spearpy.journal.errors import JournalError, JournalFull
from spearpy.journal.records import (
    END,
    MAX_OUTCOME_CHARS,
    End,
    Record,
    Start,
    encode,
    make_step,
)
from spearpy.journal.store import (
    DEFAULT_MAX_JOURNAL_BYTES,
    JournalStore,
    StoreWriter,
    SyncPolicy,
)
from spearpy.observe.scrub import SecretScrubber

# As cassettes: shorter "secrets" would scrub ordinary words.
MIN_SECRET_LENGTH = 4


class JournalWriter:
    """Appends one run's records in order; safe to call from several threads
    (each record is numbered and stored under one lock)."""

    def __init__(self, handle: StoreWriter, *, secrets: Iterable[str] = (),
                 max_bytes: int = DEFAULT_MAX_JOURNAL_BYTES) -> None:
        self._handle = handle
        self.scrubber = SecretScrubber(secrets, min_length=MIN_SECRET_LENGTH)
        self.max_bytes = max_bytes
        self._lock = threading.Lock()

    @classmethod
    def open(cls, store: JournalStore, journal_id: str, *, secrets: Iterable[str] = (),
             max_bytes: int = DEFAULT_MAX_JOURNAL_BYTES,
             sync: SyncPolicy = SyncPolicy.SEND) -> JournalWriter:
        """A writer on a new journal, or going on after an existing one's last record."""
        handle = store.open_writer(journal_id, sync=sync)
        if handle.ended:
            handle.close()
            raise JournalError(f"journal {journal_id!r} has ended: nothing can be added to it")
        return cls(handle, secrets=secrets, max_bytes=max_bytes)

    @property
    def journal_id(self) -> str:
        return self._handle.journal_id

    @property
    def next_seq(self) -> int:
        return self._handle.next_seq

    @property
    def bytes_used(self) -> int:
        return self._handle.bytes_used

    def start(self, *, module: bytes, argv: Iterable[str], env: Iterable[str], stdin: bytes,
              limits: dict[str, Any], flags: dict[str, Any]) -> int:
        """Write step 0 (Start.of_run); its size in bytes."""
        return self.write_start(Start.of_run(module=module, argv=argv, env=env, stdin=stdin,
                                             limits=limits, flags=flags,
                                             scrubber=self.scrubber))

    def write_start(self, record: Start) -> int:
        """Write step 0 as given (a run knows its module by digest only)."""
        with self._lock:
            if self._handle.next_seq:
                raise JournalError(f"journal {self.journal_id!r} has started already")
            return self._write(record)

    def append(self, kind: str, request: Any, answer: Any) -> int:
        """Write the next step: an answer of `kind` to `request`; its size in bytes."""
        with self._lock:
            self._check_open()
            return self._write(make_step(self._handle.next_seq, kind, request, answer,
                                         self.scrubber))

    def end(self, outcome: str, exit_code: int) -> int:
        """Write the end record (never refused for size) and mark the journal ended."""
        if not isinstance(outcome, str) or len(outcome) > MAX_OUTCOME_CHARS:
            raise JournalError(f"an outcome is a name of at most {MAX_OUTCOME_CHARS} characters")
        with self._lock:
            self._check_open()
            return self._write(End(self._handle.next_seq, outcome, int(exit_code)))

    def sync(self) -> None:
        """A send completed: under policy `send`, make everything so far durable."""
        with self._lock:
            self._handle.sync()

    def close(self) -> None:
        with self._lock:
            self._handle.close()

    def __enter__(self) -> JournalWriter:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def _check_open(self) -> None:
        if self._handle.ended:
            raise JournalError(f"journal {self.journal_id!r} has ended")
        if not self._handle.next_seq:
            raise JournalError(f"journal {self.journal_id!r} has no start record yet")

    def _write(self, record: Record) -> int:
        line = encode(record)
        size = len(line) + 1
        total = self._handle.bytes_used + size
        if record.kind != END and total > self.max_bytes:
            raise JournalFull(
                f"journal {self.journal_id!r} is full: step {record.seq} ({record.kind}, "
                f"{size} bytes) would take it to {total} bytes, past max_journal_bytes "
                f"{self.max_bytes}")
        self._handle.append(record.seq, record.kind, line)
        return size
