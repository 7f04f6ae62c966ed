"""Which inputs are still to run, handing them to an executor
(spearpy/executors), and what happens to one whose worker died.

An input that was running on a worker when it died (processes, Ray) goes
back to the front of the queue, up to `max_attempts` runs; after that it is
reported as `worker_lost` instead of taking down worker after worker.
"""

from __future__ import annotations

import hashlib
import queue
import threading
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from spearpy.batch.jobs import (
    WORKER_LOST,
    BatchInput,
    WorkerError,
    failure_record,
    record_of,
    run_of,
)
from spearpy.executors.base import ExecutorError

if TYPE_CHECKING:
    from spearpy.batch.spec import WorkerSpec
    from spearpy.executors.base import Executor
    from spearpy.host import Host, LoadedModule
    from spearpy.outcome import RunResult

# One retry after a crash covers a worker killed from outside (OOM killer,
# node loss); a third death on the same input says the input is the cause.
DEFAULT_MAX_ATTEMPTS = 3
# An input's journal held by another writer when its run opened it: a worker
# of a killed batch still finishing (its next prepare waits for the lock).
# More than this many times is another batch writing the same results.
_MAX_BUSY = 3

Emit = Callable[[dict[str, Any]], None]


class Dispatch:
    def __init__(self, jobs: Iterable[BatchInput], emit: Emit,
                 max_attempts: int = DEFAULT_MAX_ATTEMPTS) -> None:
        if max_attempts < 1:
            raise ValueError("max_attempts must be at least 1")
        self._pending: deque[tuple[BatchInput, int]] = deque((job, 1) for job in jobs)
        self._emit = emit
        self.max_attempts = max_attempts
        self.running = 0
        self.retried = 0
        self._busy: dict[str, int] = {}

    @property
    def idle(self) -> bool:
        return not self._pending and self.running == 0

    @property
    def has_pending(self) -> bool:
        return bool(self._pending)

    def take(self) -> tuple[BatchInput, int] | None:
        if not self._pending:
            return None
        self.running += 1
        return self._pending.popleft()

    def finished(self, record: dict[str, Any]) -> None:
        self.running -= 1
        self._emit(record)

    def busy(self, job: BatchInput, attempt: int) -> bool:
        """`job`'s journal was held by another writer: run it again (not an
        attempt of its own) unless that keeps happening."""
        self._busy[job.key] = tries = self._busy.get(job.key, 0) + 1
        if tries > _MAX_BUSY:
            return False
        self.running -= 1
        self._pending.appendleft((job, attempt))
        return True

    def lost(self, job: BatchInput, attempt: int, why: str) -> None:
        """The worker running `job` died before answering."""
        self.running -= 1
        if attempt >= self.max_attempts:
            self._emit(failure_record(
                job, WORKER_LOST, f"the worker died on each of {attempt} attempts to run this "
                f"input (last: {why})", attempt))
        else:
            self.retried += 1
            self._pending.appendleft((job, attempt + 1))


# How often the driver looks up from the runs' ends to notice a stop request.
_POLL_S = 0.1
_End = tuple[BatchInput, int, "RunResult | None", "BaseException | None"]


def drive(executor: Executor, spec: WorkerSpec, jobs: Sequence[BatchInput], emit: Emit,
          stop: threading.Event, *, capacity: int, max_attempts: int = DEFAULT_MAX_ATTEMPTS,
          local: tuple[Host, LoadedModule] | None = None) -> int:
    """Run every job on `executor`, at most `capacity` at a time, emitting
    each result record; `local`: the Host and module for an executor in this
    process. Returns how many runs a dying worker lost. `stop` is every
    run's cancel event: Ctrl-C ends the guests in flight instead of waiting
    for them. The executor is started here and closed on the way out."""
    dispatch = Dispatch(jobs, emit, max_attempts)
    sha256 = hashlib.sha256(spec.wasm).hexdigest()
    host, module = local or (None, None)
    ends: queue.SimpleQueue[_End] = queue.SimpleQueue()
    lost = 0

    def submit(job: BatchInput, attempt: int) -> None:
        def on_end(result: RunResult | None, error: BaseException | None) -> None:
            ends.put((job, attempt, result, error))

        # Here, not when the batch starts: a retried input's journal may have
        # ended on the worker that died.
        journal = spec.journals.prepare(job) if spec.journals is not None else None
        executor.submit(run_of(job, attempt, spec.settings, spec.name, sha256, journal),
                        spec.wasm, host, module, stop, None, on_end)

    try:
        executor.start()
        while not dispatch.idle and not stop.is_set():
            while dispatch.running < capacity and (taken := dispatch.take()) is not None:
                submit(*taken)
            try:
                job, attempt, result, error = ends.get(timeout=_POLL_S)
            except queue.Empty:
                if executor.failure is not None:
                    raise executor.failure from None
                continue
            if result is not None and result.outcome == WORKER_LOST:
                lost += 1
                dispatch.lost(job, attempt, result.message)
            elif not (_journal_busy(error) and dispatch.busy(job, attempt)):
                dispatch.finished(record_of(job, attempt, result, error,
                                            transcripts=spec.transcripts,
                                            events=spec.settings.events))
    except ExecutorError as exc:
        stop.set()  # the runs in flight end with the executor
        raise WorkerError(f"batch workers cannot run: {exc}") from exc
    except BaseException:
        stop.set()
        raise
    finally:
        executor.close()
    return lost


def _journal_busy(error: BaseException | None) -> bool:
    """The run could not open its journal: another writer holds it. Worker
    processes report their errors as text ("JournalBusy: ...")."""
    from spearpy.journal.errors import JournalBusy

    return isinstance(error, JournalBusy) or str(error).startswith(f"{JournalBusy.__name__}:")
