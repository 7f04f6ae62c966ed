"""What a journaled run whose worker died goes on with, on another worker
(procs.py, ray_runs.py) or in a restarted service (serve/resume.py).

A run journaled in `record` mode resumes its own journal as it is. A fork
(`mode="fork"`) cannot be submitted again as it was: its new journal exists
by then, and a fork starts that journal afresh. So a fork whose journal was
started goes on with that journal instead, in `record` mode: its steps
answer, then the run goes on live. A fork cut short while it was still
copying the steps it forks from (before the fork point) first gets the rest
of them copied, record for record, from the journal it forks, so the steps
up to the fork point still come from there and not from a live call. A fork
that had not written its start yet is submitted again as a fork.

A journal that ended (the run ended on the worker, whose death lost its
result on the way) is replayed instead: offline, the run's output, exit
code and events come back from it, nothing is asked again; but a run that
had ended `timeout` or `cancelled`, which a replay does not give again,
ends `worker_lost` saying how it had ended. A journal that
holds no start record yet (its worker died creating it) cannot be resumed:
the run ends `worker_lost` (`spearpy batch` then runs the input again,
starting that journal over).

A run that ends because its worker was killed under it for outliving its
deadline (watch.py) gets its journal's end record from the executor, once
the worker is dead and its writer lock gone with it (`end_journal`): the
journal then says what the run's caller was told, `timeout`, as the journal
of a run its worker ended at the deadline does, and no resume goes on with
it live (with the time left at its last step, which can be the whole
timeout again). A run lost with a hung worker gets none: it was cut, not
ended, and its journal resumes like that of a worker that died.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from typing import TYPE_CHECKING

from spearpy.executors.base import RUN_RESUMED, RunJob
from spearpy.observe.events import Event

if TYPE_CHECKING:
    from spearpy.durable import JournalSpec
    from spearpy.journal.store import JournalStore, StoreWriter
    from spearpy.outcome import RunResult

_log = logging.getLogger("spearpy.executors")


def resumed_event(why: str, resumes: int) -> Event:
    """The RUN_RESUMED event a lost run's `on_event` gets before it resumes."""
    return Event(RUN_RESUMED, "", -1, time.time(), data={"message": why, "resumes": resumes})


def resumed_job(job: RunJob) -> RunJob | str:
    """`job` as it resumes after its worker died, or why it cannot (its run
    then ends worker_lost). A journal that cannot be read here leaves the
    job as it was: the worker then reports the journal's error as the run's end."""
    spec = job.journal
    if spec is None or spec.mode == "replay":
        return job  # a replay is made again whole
    from spearpy.journal import JournalError

    try:
        own = continued_fork(spec) if spec.mode == "fork" else spec
        if own is None:
            return job  # a fork that wrote nothing: fork again
        going = _as_it_stands(own)
    except (JournalError, OSError) as exc:
        _log.warning("run %s: its journal cannot be read to resume it: %s", job.key, exc)
        return job
    if isinstance(going, str):
        return going
    return job if going == spec else dataclasses.replace(job, journal=going)


def _as_it_stands(spec: JournalSpec) -> JournalSpec | str:
    """A record-mode journal as the run goes on with it: itself; a replay
    of it once it ended; why not, when it holds no start record."""
    store, journal_id = spec.locate()
    try:
        info = store.info(journal_id)
        if info is None:
            return spec  # never created: the run starts it
        if info.ended:
            return _replay_of_ended(spec, store, journal_id)
        started = False
        for _record in store.records(journal_id):
            started = True  # its start: the rest is the resumed run's to read
            break
    finally:
        store.close()
    if not started:
        return (f"its journal {journal_id!r} holds no start record (its worker died "
                "creating it): nothing to resume from")
    return spec


# Endings a replay does not give again: the clock or a caller made them, not
# the journal's answers (a replay of a timed-out run runs out of answers instead).
_NOT_REPLAYED = frozenset({"timeout", "cancelled", "worker_lost"})


def _replay_of_ended(spec: JournalSpec, store: JournalStore, journal_id: str
                     ) -> JournalSpec | str:
    from spearpy.journal.records import End

    end = store.last_record(journal_id)
    if isinstance(end, End) and end.outcome in _NOT_REPLAYED:
        return (f"its run had ended {end.outcome} (exit code {end.exit_code}) before its "
                "result was lost with the worker")
    return dataclasses.replace(spec, mode="replay", until=None)


def end_journal(job: RunJob, result: RunResult, wait: float = 0.0) -> None:
    """Write `result`'s outcome as the end of the journal `job` was writing,
    whose worker was killed: its writer lock goes with its process, which
    may take up to `wait` seconds more to die (a Ray actor). Nothing when
    the journal holds no start record or has ended (its worker ended it
    before it was killed); a journal that cannot be written is logged: the
    run's end stands either way."""
    spec = job.journal
    target = spec.fork_into if spec is not None and spec.mode == "fork" else spec
    if target is None or target.mode == "replay":
        return  # a replay writes nothing
    from spearpy.journal import JournalBusy, JournalError

    until = time.monotonic() + wait
    while True:
        try:
            _write_end(target, result)
            return
        except JournalBusy as exc:
            if time.monotonic() < until:
                time.sleep(_BUSY_POLL_S)
                continue
            why: Exception = exc
        except (JournalError, OSError) as exc:
            why = exc
        _log.error("run %s: its journal could not be ended %s: %s", job.key, result.outcome,
                   why)
        return


_BUSY_POLL_S = 0.1  # how often end_journal asks again for a dying worker's lock


def _write_end(spec: JournalSpec, result: RunResult) -> None:
    from spearpy.journal.records import END, End, encode

    store, journal_id = spec.locate()
    try:
        info = store.info(journal_id)
        if info is None or info.ended:
            return  # opening a writer would create it
        with store.open_writer(journal_id, sync=spec.sync) as writer:
            seq = writer.next_seq
            if writer.ended or seq == 0:
                return
            writer.append(seq, END, encode(End(seq, result.outcome, result.exit_code)))
            writer.sync()
    finally:
        store.close()


def continued_fork(spec: JournalSpec) -> JournalSpec | None:
    """The journal a fork (`spec`, mode "fork") that stopped goes on with:
    its own (`spec.fork_into`, in record mode), holding every step up to
    the fork point; None when it wrote no start record yet (fork again).
    Only when no run holds the fork's journal (its writer died)."""
    from spearpy.journal import JournalError

    target = spec.fork_into
    if target is None:
        raise JournalError("a fork needs the journal to write (fork_into)")
    store, journal_id = target.locate()
    try:
        info = store.info(journal_id)
        if info is None:
            return None
        if not info.ended:
            with store.open_writer(journal_id, sync=target.sync) as writer:
                if writer.next_seq == 0:
                    return None  # created, killed before its start record
                _copy_until_fork(spec, writer)
    finally:
        store.close()
    return dataclasses.replace(target, mode="record", until=None, fork_into=None)


def _copy_until_fork(spec: JournalSpec, writer: StoreWriter) -> None:
    """Copy the forked journal's steps the fork's journal lacks, up to the
    fork point (`spec.until`; every step when None). The fork copied each
    step as it replayed it, so its journal holds steps 1..k of the forked
    one, seq for seq; the copy goes on from k + 1, as they were stored."""
    from spearpy.journal import JournalCorrupt
    from spearpy.journal.records import END, encode

    first = writer.next_seq
    if spec.until is not None and first > spec.until:
        return  # it went live: its journal holds every step it forked
    store, journal_id = spec.locate()
    try:
        for record in store.records(journal_id):
            if record.seq < first or record.kind == END:
                continue
            if spec.until is not None and record.seq > spec.until:
                break
            if record.seq != writer.next_seq:
                raise JournalCorrupt(f"journal {journal_id!r} step {record.seq} does not "
                                     f"follow the fork's last step {writer.next_seq - 1}")
            writer.append(record.seq, record.kind, encode(record))
        writer.sync()
    finally:
        store.close()


__all__ = ["continued_fork", "end_journal", "resumed_event", "resumed_job"]
