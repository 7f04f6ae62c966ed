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

import contextlib
import threading
import time
from collections.abc import Iterable, Sequence
from types import TracebackType
from typing import Any

from spearpy.journal._flusher import FLUSHER
from spearpy.journal.errors import JournalError, JournalFull
from spearpy.journal.hostcall_answers import check_hostcall_answer, stored_writes
from spearpy.journal.lines import (
    EncodedScrub,
    completion_line,
    guest_output_line,
    hostcall_line,
)
from spearpy.journal.records import (
    END,
    HOSTCALL,
    MAX_OUTCOME_CHARS,
    START,
    End,
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
COMPLETION = "chat.completion"
GUEST_OUTPUT = "guest_tool.output"
_BUFFER_BYTES = 1 << 16  # buffered records past this are written without waiting


class JournalWriter:
    """Appends one run's records in order; safe to call from several threads
    (each record is numbered and stored under one lock).

    `buffered`: records are numbered, sized and charged as they are
    appended but reach the store together at the next `flush()` (one
    write for the lot), which a run calls before each paid call (a
    completion, a tool that is not the guest's), at each send's end and at
    its end. So a crash of the process loses at most the records since the
    last paid call was made: at most that call is made again by a resume,
    as when the crash comes while it is in flight. `max_wait` (seconds,
    None: no bound): a record waits at most about that long unwritten, the
    write then made on the flusher thread (a guest that computes on after
    an answer, without a call, still has it written)."""

    def __init__(self, handle: StoreWriter, *, secrets: Iterable[str] = (),
                 max_bytes: int = DEFAULT_MAX_JOURNAL_BYTES, buffered: bool = False) -> None:
        self._handle = handle
        self.scrubber = SecretScrubber(secrets, min_length=MIN_SECRET_LENGTH)
        self._scrub = EncodedScrub(self.scrubber)
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        self._buffered = buffered
        self._pending: list[tuple[int, str, bytes]] = []
        self._pending_bytes = 0
        self._pending_since = 0.0  # when the oldest record waiting was made
        self._soon = False  # a write of them is queued on the flusher thread
        self._timed = False  # a max_wait check of them is due on the flusher thread
        self.max_wait: float | None = None
        self._closed = False
        self._ended = False
        self._next_seq = handle.next_seq
        self._bytes_used = handle.bytes_used

    @classmethod
    def open(cls, store: JournalStore, journal_id: str, *, secrets: Iterable[str] = (),
             max_bytes: int = DEFAULT_MAX_JOURNAL_BYTES, sync: SyncPolicy = SyncPolicy.SEND,
             buffered: bool = False, validate: bool = True) -> JournalWriter:
        """A writer on a new journal, or going on after an existing one's last
        record (`validate`: see JournalStore.open_writer)."""
        handle = store.open_writer(journal_id, sync=sync, validate=validate)
        if handle.ended:
            handle.close()
            raise JournalError(f"journal {journal_id!r} has ended: nothing can be added to it")
        return cls(handle, secrets=secrets, max_bytes=max_bytes, buffered=buffered)

    @property
    def journal_id(self) -> str:
        return self._handle.journal_id

    @property
    def next_seq(self) -> int:
        return self._next_seq

    @property
    def bytes_used(self) -> int:
        return self._bytes_used

    def start(self, *, module: bytes, argv: Iterable[str], env: Iterable[str], stdin: bytes,
              limits: dict[str, Any], flags: dict[str, Any]) -> int:
        """Write step 0 (Start.of_run); its size in bytes."""
        return self.write_start(Start.of_run(module=module, argv=argv, env=env, stdin=stdin,
                                             limits=limits, flags=flags,
                                             scrubber=self.scrubber))

    def write_start(self, record: Start) -> int:
        """Write step 0 as given (a run knows its module by digest only)."""
        with self._lock:
            if self._next_seq:
                raise JournalError(f"journal {self.journal_id!r} has started already")
            return self._write(START, encode(record))

    def append(self, kind: str, request: Any, answer: Any) -> int:
        """Write the next step: an answer of `kind` to `request`; its size in bytes."""
        with self._lock:
            self._check_open()
            return self._write(kind, encode(make_step(self._next_seq, kind, request, answer,
                                                      self.scrubber)))

    def append_completion(self, request_sha256: str, answer: Any,
                          raw_body: bytes | None = None) -> int:
        """append("chat.completion", Digested(request_sha256), answer), faster;
        `raw_body`: answer["body"] as the upstream sent it, if it was."""
        with self._lock:
            self._check_open()
            return self._write(COMPLETION, completion_line(
                self._next_seq, request_sha256, answer, self._scrub, self.scrubber, raw_body))

    def append_guest_output(self, name: str, arguments: str, ok: bool, output: str,
                            error_code: str | None) -> int:
        """append("guest_tool.output", {"name", "arguments"}, [ok, output,
        error_code]), faster."""
        with self._lock:
            self._check_open()
            seq = self._next_seq
            line = guest_output_line(seq, name, arguments, ok, output, error_code,
                                     self.scrubber)
            if line is None:
                line = encode(make_step(seq, GUEST_OUTPUT, {"name": name, "arguments": arguments},
                                        [ok, output, error_code], self.scrubber))
            return self._write(GUEST_OUTPUT, line)

    def append_hostcall(self, call: str, args: tuple[int, ...], rc: int | None,
                        writes: Sequence[tuple[int, bytes]], t: float) -> int:
        """append("hostcall", {"call", "args"}, hostcall_answer(rc, writes,
        t)), faster."""
        check_hostcall_answer(rc, t)
        stored = stored_writes(writes, self.scrubber) if writes else []
        with self._lock:
            self._check_open()
            seq = self._next_seq
            line = hostcall_line(seq, call, args, rc, stored, t, self.scrubber)
            if line is None:
                line = encode(make_step(seq, HOSTCALL, {"call": call, "args": list(args)},
                                        {"rc": rc, "writes": stored, "t": float(t)},
                                        self.scrubber))
            return self._write(HOSTCALL, line)

    def end(self, outcome: str, exit_code: int) -> int:
        """Write the end record (never refused for size) and mark the journal ended."""
        if not isinstance(outcome, str) or len(outcome) > MAX_OUTCOME_CHARS:
            raise JournalError(f"an outcome is a name of at most {MAX_OUTCOME_CHARS} characters")
        with self._lock:
            self._check_open()
            size = self._write(END, encode(End(self._next_seq, outcome, int(exit_code))))
            self._ended = True  # written by the flush below, or kept for a later one
            self._flush()
            return size

    def waiting(self) -> bool:
        """Whether records wait to be written. Read without the lock: a
        stale answer only moves a write to the next call or to max_wait."""
        return bool(self._pending)

    def flush_soon(self) -> None:
        """Hand the buffered records to the store on the process's flusher
        thread (journal/_flusher.py), without waiting for it: the caller is
        about to wait for something else. At the process's thread limit the
        write is made here, so the caller must not hold the writer's lock."""
        if not self._soon:
            self._soon = True
            FLUSHER.soon(self._flush_queued)

    def _flush_timed(self) -> None:
        """On the flusher thread, `max_wait` after a record waited: written
        if it still waits and is old enough, else checked again when the
        oldest one waiting will be."""
        with self._lock:
            wait = self.max_wait
            if self._closed or not self._pending or wait is None:
                self._timed = False
                return
            left = wait - (time.monotonic() - self._pending_since)
            if left > 0:
                self._timed = FLUSHER.later(left, self._flush_timed)
                return
            self._timed = False
            self._flush()

    def _flush_queued(self) -> None:
        self._soon = False  # before the write: records appended from here are queued again
        with self._lock:
            if not self._closed:
                self._flush()

    def flush(self) -> None:
        """Hand the buffered records to the store (one write), and wait for
        the last send's sync if it is still running on its worker: what was
        journaled is written, and durable as the policy says, before the
        caller makes its next paid call."""
        with self._lock:
            self._flush()
            self._handle.sync_wait()

    def sync(self) -> None:
        """A send completed: under policy `send`, make everything so far
        durable. The file store syncs on a worker, waited for by the next
        `flush` (before the next paid call) or `close`."""
        with self._lock:
            self._flush()
            self._handle.sync_begin()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            try:
                self._flush()
            finally:
                self._handle.close()

    def __enter__(self) -> JournalWriter:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def _check_open(self) -> None:
        # An end record is written out as it is made (end()), or kept with
        # the records its failed write keeps.
        if self._handle.ended or self._ended:
            raise JournalError(f"journal {self.journal_id!r} has ended")
        if not self._next_seq:
            raise JournalError(f"journal {self.journal_id!r} has no start record yet")

    def _write(self, kind: str, line: bytes) -> int:
        seq = self._next_seq
        size = len(line) + 1
        total = self._bytes_used + size
        if kind != END and total > self.max_bytes:
            raise JournalFull(
                f"journal {self.journal_id!r} is full: step {seq} ({kind}, "
                f"{size} bytes) would take it to {total} bytes, past max_journal_bytes "
                f"{self.max_bytes}")
        if self._buffered:
            if not self._pending:
                self._pending_since = time.monotonic()
                if self.max_wait is not None and not self._timed:
                    self._timed = FLUSHER.later(self.max_wait, self._flush_timed)
            self._pending.append((seq, kind, line))
            self._pending_bytes += size
        else:
            self._handle.append(seq, kind, line)
        self._next_seq, self._bytes_used = seq + 1, total
        if self._pending_bytes >= _BUFFER_BYTES:
            # A guest reading the clock in a loop, say. Its answer is given
            # whatever comes of this write: a failure keeps the records for
            # the next flush (before a paid call), which reports it.
            with contextlib.suppress(JournalError):
                self._flush()
        return size

    def _flush(self) -> None:
        pending = self._pending
        if not pending:
            return
        try:
            self._handle.append_many(pending)
        except BaseException:
            # The run has gone on with these answers: the ones not stored
            # (append_many says how many were) stay, in order, for the next
            # flush. Dropping them would let later records take their seqs,
            # and a replay serve those in their place.
            kept = pending[max(self._handle.next_seq - pending[0][0], 0):]
            self._pending = kept
            self._pending_bytes = sum(len(line) + 1 for _, _, line in kept)
            raise
        self._pending, self._pending_bytes = [], 0
