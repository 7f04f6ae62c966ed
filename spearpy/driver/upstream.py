"""One upstream completion that a cancel from another thread can cut short.

httpx's synchronous client cannot be interrupted while it waits for an
answer, so a run that may be cancelled waits for the request on a worker
thread, blocked on the run's waker, which the worker wakes when the request
ends and the Host's ticker wakes when the run is cancelled. The abandoned
request ends on its own (request timeout, run deadline, or the Host closing
its client) and the backend starts no further attempt, because the request
carries the same cancel event.

Workers are kept for the next request: starting a thread per request cost
~150 us of CPU and ~0.5 ms of wall time on the 2-core development machine,
against ~45 us to hand a request to a waiting worker.
"""

from __future__ import annotations

import os
import queue
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from spearpy.backends.base import Backend, CompletionRequest
    from spearpy.chat.protocol import CompletionResult
    from spearpy.fds import Waker


# A worker that waits this long for a request exits: a burst of concurrent
# sends does not leave its threads behind for good.
WORKER_IDLE_S = 30.0


class _Workers:
    """Daemon threads that run requests, each reused once its request ends.

    A request abandoned on cancel keeps its worker until it ends on its own;
    the next request finds another worker or starts one. `idle` counts the
    waiting workers that no queued request is promised to, so a worker whose
    wait times out leaves only when that does not strand a request."""

    def __init__(self, idle_s: float = WORKER_IDLE_S) -> None:
        self._idle_s = idle_s
        self.forget()

    def forget(self) -> None:
        """Start with no workers (in a forked child, the parent's are not there)."""
        self._jobs: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._idle = 0

    @property
    def idle(self) -> int:
        return self._idle

    def submit(self, job: Callable[[], None]) -> None:
        """Run `job` (which must not raise) on a worker. Raises (RuntimeError)
        when a worker was needed and no thread could start: then the job
        was not queued, and no later worker runs it."""
        with self._lock:
            start = self._idle == 0
            if not start:
                self._idle -= 1  # that worker is promised this job
        if start:
            threading.Thread(target=self._work, name="spearpy-upstream", daemon=True).start()
        self._jobs.put(job)

    def _work(self) -> None:
        while True:
            try:
                job = self._jobs.get(timeout=self._idle_s)
            except queue.Empty:
                with self._lock:
                    if self._idle > 0:
                        self._idle -= 1
                        return
                continue  # a job is promised to a waiting worker: maybe this one
            job()
            with self._lock:
                self._idle += 1


_WORKERS = _Workers()
os.register_at_fork(after_in_child=_WORKERS.forget)


class _Outcome:
    __slots__ = ("done", "error", "result")

    def __init__(self) -> None:
        self.done = threading.Event()
        self.result: CompletionResult | None = None
        self.error: BaseException | None = None


def complete(backend: Backend, request: CompletionRequest,
             waker: Waker | None) -> CompletionResult | None:
    """The backend's result, or None when the run was cancelled first.

    Runs that nobody can cancel (no waker) call the backend directly: a
    thread per request is only worth paying for when a cancel can arrive.
    """
    cancel = request.cancel
    if waker is None or cancel is None:
        return backend.complete(request)
    if cancel.is_set():
        return None
    outcome = _Outcome()

    def work() -> None:
        try:
            outcome.result = backend.complete(request)
        except BaseException as exc:  # handed to the waiting thread, which reports it
            outcome.error = exc
        finally:
            outcome.done.set()
            waker.wake()

    try:
        _WORKERS.submit(work)
    except RuntimeError:  # no thread could start (the process's limit): not queued either
        return backend.complete(request)  # a cancel is then seen when the request ends
    waker.wait_until(lambda: outcome.done.is_set() or cancel.is_set(), None)
    if not outcome.done.is_set():
        return None
    if outcome.error is not None:
        raise outcome.error
    return outcome.result
