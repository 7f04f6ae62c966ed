"""The interface every journal store implements, and what they share: ids,
fsync policies, page sizes, and reading records back in order.

A store keeps encoded lines (records.py) under a journal id, in seq order.
One writer per journal id at a time: a second `open_writer` gets JournalBusy.
Reads come in pages and never hold a whole journal in memory.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections.abc import Generator, Iterator
from dataclasses import dataclass
from enum import StrEnum
from types import TracebackType

from spearpy.journal.errors import JournalCorrupt, JournalError
from spearpy.journal.records import END, Record, Start, decode

DEFAULT_MAX_JOURNAL_BYTES = 64 << 20
PAGE_RECORDS = 512
PAGE_BYTES = 1 << 20
"""A read page: at most PAGE_RECORDS records, and none more once PAGE_BYTES
of them are in (a page holds at least one)."""

# An id names a file in the file store: no separators, no leading dot.
_ID = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.@+=-]{0,199}\Z")


class SyncPolicy(StrEnum):
    """When an append is made durable (survives a power cut, not only a crash
    of the process): at every append, when the caller says a send completed
    (`sync()`), or never (left to the OS)."""

    SEND = "send"
    EVERY = "every"
    NONE = "none"


def check_id(journal_id: str) -> str:
    if not isinstance(journal_id, str) or not _ID.match(journal_id):
        raise JournalError(
            f"bad journal id {journal_id!r}: 1 to 200 of A-Z a-z 0-9 _ . @ + = -, "
            f"not starting with . or -")
    return journal_id


@dataclass(frozen=True, slots=True)
class JournalInfo:
    id: str
    ended: bool


class StoreWriter(ABC):
    """One journal open for appending; holds the journal's writer lock until closed."""

    def __init__(self, journal_id: str, next_seq: int, bytes_used: int, ended: bool) -> None:
        self.journal_id = journal_id
        self.next_seq = next_seq  # records already stored
        self.bytes_used = bytes_used  # their lines' bytes, a newline each
        self.ended = ended

    @abstractmethod
    def append(self, seq: int, kind: str, line: bytes) -> None:
        """Store one encoded record (no newline) whole, or raise JournalError
        having stored none of it. An `end` record marks the journal ended."""

    def append_many(self, records: list[tuple[int, str, bytes]]) -> None:
        """Store (seq, kind, line) records in order (the file store in one
        write). On JournalError, `next_seq` and `bytes_used` say how many
        of them were stored: the first ones, whole."""
        for seq, kind, line in records:
            self.append(seq, kind, line)

    @abstractmethod
    def sync(self) -> None:
        """Make every append so far durable (policy `send`; the others need nothing)."""

    def sync_begin(self) -> None:
        """Start making every append so far durable; `sync_wait` waits for
        it. Stores that cannot sync beside their appends sync here."""
        self.sync()

    def sync_wait(self) -> None:  # noqa: B027 - a store that syncs in sync_begin waits for none
        """Return once the last `sync_begin`'s sync is done (JournalError if it failed)."""

    @abstractmethod
    def close(self) -> None:
        """Release the writer lock; idempotent."""

    def __enter__(self) -> StoreWriter:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


class JournalStore(ABC):
    """Journals by id: written by one writer at a time, read in pages."""

    def __init__(self, *, max_record_bytes: int = DEFAULT_MAX_JOURNAL_BYTES) -> None:
        # A record longer than any journal may be is damage, not data: refused
        # before it is read into memory.
        self.max_record_bytes = max_record_bytes

    @abstractmethod
    def open_writer(self, journal_id: str, *, sync: SyncPolicy = SyncPolicy.SEND,
                    validate: bool = True) -> StoreWriter:
        """Open a journal for appending, creating it if new; a journal that
        exists goes on after its last record. JournalBusy if another writer has it.
        `validate=False`: the caller reads every record through `records()`
        before it appends (a resume's reader does), so the file store need
        not decode them all first as well."""

    @abstractmethod
    def list(self) -> list[JournalInfo]:
        """Every journal, by id."""

    def info(self, journal_id: str) -> JournalInfo | None:
        """One journal's entry, None when the store has none of that id.
        Stores answer it without listing every journal (a run's start asks)."""
        return next((i for i in self.list() if i.id == journal_id), None)

    @abstractmethod
    def _lines(self, journal_id: str, after: int = -1) -> Iterator[tuple[str, bytes]]:
        """(where, line) for each stored record after seq `after` in order,
        `where` naming it for an error ("line 7", "step 6"); read a page at
        a time. JournalError when there is no such journal."""

    @abstractmethod
    def last_record(self, journal_id: str) -> Record | None:
        """The journal's last record (None when it has none), read alone:
        the records before it are neither read nor checked."""

    def records(self, journal_id: str, after: int = -1) -> Generator[Record, None, None]:
        """The journal's records in order, checked: each decodes, seqs follow
        0, 1, 2... with the start first and nothing after the end. `after`:
        only those after that seq (a page of a long journal; the ones before
        it are skipped without being decoded, nor checked)."""
        check_id(journal_id)
        ended = False
        first = max(after + 1, 0)
        for expected, (where, line) in enumerate(self._lines(journal_id, after), start=first):
            record = self._decoded(journal_id, where, line)
            problem = None
            if record.seq != expected:
                problem = f"has seq {record.seq}, expected {expected}"
            elif ended:
                problem = "follows the end record"
            elif (expected == 0) != isinstance(record, Start):
                problem = "is a start record not at step 0" if expected else \
                    "is not the start record"
            if problem is not None:
                raise JournalCorrupt(f"journal {journal_id!r} {where} {problem}")
            ended = record.kind == END
            yield record

    @staticmethod
    def _decoded(journal_id: str, where: str, line: bytes) -> Record:
        try:
            return decode(line)
        except JournalCorrupt as exc:
            raise JournalCorrupt(f"journal {journal_id!r} {where}: {exc}") from None

    def close(self) -> None:  # noqa: B027 - stores without connections need nothing
        """Release what the store holds; idempotent."""

    def __enter__(self) -> JournalStore:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()
