"""The durable run store: SQLite in the state directory, one writer thread.

Every run's record and every event go here before anyone is told about them:
a subscriber is only sent an event once it is committed, so a replay from
the store and the live stream never disagree, and a run a client has seen
survives a crash. WAL lets readers (the API, on other threads) read while the
writer commits; synchronous=NORMAL survives a killed process (not a power
cut) without an fsync per event.

One service per state directory (a lock file): a second one would mark the
first one's runs as interrupted.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import queue
import sqlite3
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from spearpy.errors import SpearpyError
from spearpy.serve import store_resume
from spearpy.serve.store_ends import UnstoredEnds
from spearpy.serve.store_resume import EventHistory, Resumable, ResumeInputs
from spearpy.serve.store_rows import (
    COLUMNS,
    IN_PROGRESS,
    LISTED,
    LOGS,
    UnstoredEnd,
    column,
    create_tables,
    end_columns,
    logs_of_result,
    record_of,
)
from spearpy.serve.store_rows import EventRow as EventRow

# Reads come in pages so that no client, however slow, makes the service hold
# more than a page of stored data: at most this many rows, and no more rows
# once their text passes the byte count (a page holds at least one row).
PAGE_EVENTS = 512
PAGE_EVENT_BYTES = 1 << 20
_PAGE_RUN_BYTES = 4 << 20
INTERRUPTED = store_resume.INTERRUPTED
# Commits per batch: enough to keep up with many chatty runs, few enough that
# the first event of a batch is not held back long.
_BATCH = 512
# Run ends the disk refused are written again this often while the service
# lives (kept in memory meanwhile, within bounds: store_ends).
RETRY_ENDS_S = 2.0

# get_run's: the whole result, not its summary; get_logs reads the logs.
_WHOLE = tuple(name for name in COLUMNS if name not in ("summary", "logs"))
MAX_SEQ = 1 << 62  # above any event's seq, within SQLite's 64-bit integers
# Called once the write is done: committed, or refused by the disk (then too,
# so live clients are never left waiting on a write that will not come).
AfterCommit = Callable[[], None]
_log = logging.getLogger("spearpy.serve")


class StoreLocked(SpearpyError, RuntimeError):
    """Another service already uses this state directory."""


class RunStore:
    """`resumable`: which of the runs a dead service left in progress resume
    (store_resume.recover); None: none do, all are marked interrupted."""

    def __init__(self, state_dir: str | os.PathLike[str],
                 resumable: Resumable | None = None) -> None:
        directory = Path(state_dir)
        directory.mkdir(parents=True, exist_ok=True)
        self._lock_fd = os.open(directory / "serve.lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self._lock_fd)
            raise StoreLocked(f"another spearpy serve uses the state directory {directory}"
                              ) from None
        try:
            self._open(directory, resumable)
        except BaseException:
            # Let go of the directory, or the next open (the operator fixed
            # what failed) would call it another service's.
            os.close(self._lock_fd)
            raise

    def _open(self, directory: Path, resumable: Resumable | None) -> None:
        self.path = directory / "runs.sqlite3"
        # 0600 from the start (SQLite gives its -wal and -shm the same): it
        # holds the runs' output, and a journaled run's env values and stdin.
        # Only when new: closing a descriptor of an open database would drop
        # this process's POSIX locks on it (spearpy/journal/sqlite.py).
        with contextlib.suppress(FileExistsError):
            os.close(os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC,
                             0o600))
        self._db = self._connect()
        try:
            create_tables(self._db)
            self.interrupted, self.resumed = store_resume.recover(self._db, resumable)
        except BaseException:
            self._db.close()
            raise
        self._readers: list[sqlite3.Connection] = []
        self._local = threading.local()
        self._readers_lock = threading.Lock()
        self._ends = UnstoredEnds()
        self._queue: queue.SimpleQueue[tuple[Callable[[sqlite3.Connection], None],
                                             Future[None] | None, AfterCommit | None] | None]
        self._queue = queue.SimpleQueue()
        self._writer = threading.Thread(target=self._write_loop, name="spearpy-serve-store",
                                        daemon=True)
        self._writer.start()

    def _connect(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False,
                             timeout=30.0)
        try:
            db.execute("PRAGMA journal_mode=WAL")  # the first read of the file: may refuse it
            db.execute("PRAGMA synchronous=NORMAL")
        except BaseException:
            db.close()
            raise
        return db

    # ---- writes: queued to the writer thread, in order ----------------------

    def _submit(self, apply: Callable[[sqlite3.Connection], None],
                after: AfterCommit | None = None) -> Future[None]:
        done: Future[None] = Future()
        self._queue.put((apply, done, after))
        return done

    def insert_run(self, row: dict[str, Any], inputs: ResumeInputs | None = None
                   ) -> Future[None]:
        """The run's record; with `inputs`, what a resume, replay or fork of
        it needs that the record leaves out (kept as long as the record)."""
        values = tuple(column(row, name) for name in COLUMNS)
        sql = f"INSERT INTO runs ({','.join(COLUMNS)}) VALUES ({','.join('?' * len(COLUMNS))})"

        def apply(db: sqlite3.Connection) -> None:
            db.execute(sql, values)
            if inputs is not None:
                store_resume.insert_inputs(db, row["id"], inputs)

        return self._submit(apply)

    def append_event(self, run_id: str, row: EventRow, after: AfterCommit) -> None:
        """One event, when nobody waits for its commit but `after`: no
        Future (a lock and a condition) made and settled for each of a run's
        events (bench SV)."""
        values = (run_id, *row)

        def apply(db: sqlite3.Connection) -> None:
            db.execute("INSERT OR REPLACE INTO events VALUES (?,?,?,?)", values)

        self._queue.put((apply, None, after))

    def finish_run(self, run_id: str, fields: dict[str, Any], final: EventRow | None,
                   after: AfterCommit | None = None) -> Future[None]:
        """The run's end event and its final record in one transaction, so a
        client that saw the end event reads the finished record. Until that
        commits, and while the disk refuses it (written again every
        RETRY_ENDS_S), reads show the end from memory."""
        fields = end_columns(fields)
        names = list(fields)
        end = UnstoredEnd(names, [column(fields, name) for name in names], final)
        self._ends.add(run_id, end)
        done = self._submit(self._end_writer(run_id, end), after)
        done.add_done_callback(lambda f: self._ends.ended(run_id, end, f.exception() is None))
        return done

    def _end_writer(self, run_id: str, end: UnstoredEnd
                    ) -> Callable[[sqlite3.Connection], None]:
        def apply(db: sqlite3.Connection) -> None:
            if end.final is not None:
                db.execute("INSERT OR REPLACE INTO events VALUES (?,?,?,?)",
                           (run_id, *end.final))
            db.execute(f"UPDATE runs SET {', '.join(f'{n}=?' for n in end.names)} WHERE id=?",
                       (*end.values, run_id))

        return apply

    def _retry_ends(self) -> None:
        """On the writer thread: each refused end again, in its own transaction,
        oldest first, until the disk refuses one (then it still refuses: the
        rest wait for the next round instead of failing one by one)."""
        for run_id, end in self._ends.refused():
            if self._commit([self._end_writer(run_id, end)]) is not None:
                return
            self._ends.stored_again(run_id, end)

    def _write_loop(self) -> None:
        retry_at = 0.0
        while True:
            if self._ends.has_refused():
                if time.monotonic() >= retry_at:
                    self._retry_ends()
                    retry_at = time.monotonic() + RETRY_ENDS_S
                try:
                    item = self._queue.get(timeout=max(retry_at - time.monotonic(), 0.0))
                except queue.Empty:
                    continue
            else:
                item = self._queue.get()
            batch = [item]
            while item is not None and len(batch) < _BATCH:
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
                batch.append(item)
            ops = [op for op in batch if op is not None]
            applies = [apply for apply, _done, _after in ops]
            error = self._commit(applies)
            errors: list[BaseException | None] = [error] * len(ops)
            if error is not None and len(ops) > 1:
                # One bad write refused the batch: each again on its own, so
                # it fails alone (not another run's record beside it).
                errors = [self._commit([apply]) for apply in applies]
            refused = [e for e in errors if e is not None]
            if refused:
                _log.error("store: %d write(s) failed (%s); live clients still get their "
                           "events, a restart will not; run ends are written again every "
                           "%g s", len(refused), refused[0], RETRY_ENDS_S)
            for (_apply, done, after), failure in zip(ops, errors, strict=True):
                # Even when the disk refused: live subscribers and a waiting
                # request hear the events and the end from memory, else a
                # failed commit of a run's end would leave them waiting forever.
                if after is not None:
                    try:
                        after()
                    except Exception:  # a subscriber's problem must not stop the writer
                        _log.exception("store: after-commit callback failed")
                if done is None:
                    continue
                if failure is not None:
                    done.set_exception(failure)
                else:
                    done.set_result(None)
            if len(ops) < len(batch):  # the stop marker: everything before it is written
                return

    def _commit(self, ops: list[Callable[[sqlite3.Connection], None]]) -> BaseException | None:
        """Apply `ops` in one transaction; the error that refused it, or None."""
        try:
            self._db.execute("BEGIN")
            for apply in ops:
                apply(self._db)
            self._db.execute("COMMIT")
        except Exception as exc:  # disk full, a locked file: fail these writes, go on
            if self._db.in_transaction:
                self._db.execute("ROLLBACK")
            return exc
        return None

    # ---- reads: any thread, one read connection per thread ------------------

    def _reader(self) -> sqlite3.Connection:
        db: sqlite3.Connection | None = getattr(self._local, "db", None)
        if db is None:
            db = self._connect()
            db.execute("PRAGMA query_only=1")
            self._local.db = db
            with self._readers_lock:
                self._readers.append(db)
        return db

    def get_run(self, run_id: str, *, output: bool = True) -> dict[str, Any] | None:
        """The run's record; `output` False leaves its output out (up to
        64 MiB each of stdout and stderr): its `result` is the summary a
        listing shows. Its log lines are left out either way (`get_logs`)."""
        record = self._get(run_id, _WHOLE if output else LISTED)
        if record is not None and not output:
            record["result"] = record.pop("summary")
        return record

    def get_logs(self, run_id: str) -> dict[str, Any] | None:
        """The run's id, status and log lines ({"logs", "dropped"}; None
        until it ends), without its result."""
        record = self._get(run_id, LOGS)
        if record is not None and record["logs"] is None and record["status"] not in IN_PROGRESS:
            record["logs"] = logs_of_result(self._reader(), run_id)  # ended by an older spearpy
        return record

    def _get(self, run_id: str, names: tuple[str, ...]) -> dict[str, Any] | None:
        row = self._reader().execute(f"SELECT {','.join(names)} FROM runs WHERE id=?",
                                     (run_id,)).fetchone()
        return None if row is None else self._ends.over(record_of(names, row))

    def list_runs(self, limit: int, before: float | None = None, status: str | None = None
                  ) -> tuple[list[dict[str, Any]], bool]:
        """Up to `limit` runs, newest first, created before `before`, without
        their output (`result` holds the summary only), and whether more
        follow. A page also ends once its rows pass _PAGE_RUN_BYTES (a run's
        request can hold a body's worth of args)."""
        where: list[str] = ["1"]
        args: list[float | str] = []
        if before is not None:
            where.append("created_at < ?")
            args.append(before)
        if status is not None:
            # An end still in memory reads as finished (UnstoredEnd.over; a
            # run's end is always "finished"): filtered the same way here, so
            # a page holds `limit` runs.
            unstored = self._ends.ids_json()
            ended = "id IN (SELECT value FROM json_each(?))"
            if status in IN_PROGRESS:
                where.append(f"status = ? AND NOT {ended}")
                args.extend((status, unstored))
            elif status == "finished":
                marks = ",".join("?" * len(IN_PROGRESS))
                where.append(f"(status = 'finished' OR (status IN ({marks}) AND {ended}))")
                args.extend((*IN_PROGRESS, unstored))
            else:
                where.append("status = ?")
                args.append(status)
        found = self._reader().execute(
            f"SELECT {','.join(LISTED)} FROM runs WHERE {' AND '.join(where)} "
            "ORDER BY created_at DESC LIMIT ?", (*args, limit + 1))
        runs: list[dict[str, Any]] = []
        size = 0
        with contextlib.closing(found):
            for row in found:
                if len(runs) == limit or size >= _PAGE_RUN_BYTES:
                    return runs, True
                size += sum(len(value) for value in row if isinstance(value, str))
                record = self._ends.over(record_of(LISTED, row))
                record["result"] = record.pop("summary")
                runs.append(record)
        return runs, False

    def resume_inputs(self, run_id: str) -> ResumeInputs | None:
        return store_resume.read_inputs(self._reader(), run_id)

    def event_history(self, run_id: str, max_kinds: int) -> EventHistory:
        """What a resumed run's events continue (store_resume.EventHistory)."""
        return store_resume.event_history(self._reader(), run_id, max_kinds)

    def events(self, run_id: str, after: int = -1, before: int | None = None) -> list[EventRow]:
        """One page of the run's events after seq `after` and before `before`,
        in seq order: at most PAGE_EVENTS, and no more once PAGE_EVENT_BYTES
        of records are in (at least one). Empty when there are none left;
        callers read on from the last seq."""
        upper = before if before is not None else MAX_SEQ
        found = self._reader().execute(
            "SELECT seq, kind, record FROM events WHERE run_id=? AND seq>? AND seq<? "
            "ORDER BY seq LIMIT ?", (run_id, after, upper, PAGE_EVENTS))
        events: list[EventRow] = []
        size = 0
        # Closed early, the statement ends its read (in WAL an open one would
        # hold its snapshot and keep the checkpoint from finishing).
        with contextlib.closing(found):
            for seq, kind, record in found:
                events.append((int(seq), str(kind), str(record)))
                size += len(record)
                if size >= PAGE_EVENT_BYTES:
                    return events
        if len(events) == PAGE_EVENTS:
            return events
        end = self._ends.get(run_id)
        final = end.final if end is not None else None
        if final is not None and after < final[0] < upper and \
                (not events or events[-1][0] < final[0]):
            events.append(final)  # the end the disk has not taken (yet)
        return events

    def close(self) -> None:
        """Write everything queued, then close; idempotent."""
        if self._writer.is_alive():
            self._queue.put(None)
            self._writer.join()
        with self._readers_lock:
            for db in self._readers:
                db.close()
            self._readers.clear()
        if self._lock_fd >= 0:
            self._db.close()
            os.close(self._lock_fd)  # releases the flock
            self._lock_fd = -1
