"""Batch executor: worker processes, each with a warm Host and a few threads.

The parent hands every worker at most `threads` inputs at a time over a pipe
and remembers which; a worker that dies (OOM killer, a crash in native code,
`kill -9`) is replaced and its unanswered inputs go back to the queue (see
dispatch.py). Workers are started with `spawn`: the parent runs threads
(epoch ticker, HTTP pools) and `fork` would copy their locks mid-use.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import signal
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess
from typing import Any

from spearpy.batch.dispatch import DEFAULT_MAX_ATTEMPTS, Dispatch, Emit
from spearpy.batch.jobs import BatchInput, WorkerError, run_job
from spearpy.batch.spec import WorkerSpec

# How often the parent looks up from its pipes to notice a stop request.
_POLL_S = 0.1
# A worker still alive this long after being told to stop is killed.
_STOP_GRACE_S = 10.0
# Workers dying before they are ready this many times in a row means they
# cannot start at all (bad config, unloadable module): fail the batch.
_MAX_START_FAILURES = 3


# ---- the worker process ---------------------------------------------------------


def _worker_main(spec: WorkerSpec, tasks: Connection, results: Connection) -> None:
    # Ctrl-C reaches the whole process group; the parent decides what stops.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        host, module = spec.warm_host()
    except BaseException as exc:
        results.send(("fatal", f"{type(exc).__name__}: {exc}"))
        return
    results.send(("ready", os.getpid(), module.from_disk_cache))
    send_lock = threading.Lock()
    cancel = threading.Event()

    def run(key: int, job: BatchInput, attempt: int) -> None:
        record = run_job(host, module, job, attempt=attempt, cancel=cancel,
                         transcripts=spec.transcripts)
        with send_lock, contextlib.suppress(OSError):  # the parent is gone: nobody to tell
            results.send(("result", key, record))

    with ThreadPoolExecutor(spec.threads, thread_name_prefix="spearpy-batch") as pool:
        while True:
            try:
                message = tasks.recv()
            except (EOFError, OSError):
                break  # the parent closed the pipe (done) or died
            if message[0] == "stop":
                break
            pool.submit(run, *message[1:])
        # Runs still going were abandoned by the parent (stop, or it died):
        # end them now instead of waiting for them on the way out.
        cancel.set()
    host.close()


# ---- the parent's view of one worker --------------------------------------------


@dataclass(eq=False)
class _Worker:
    process: BaseProcess
    tasks: Connection
    results: Connection
    running: dict[int, tuple[BatchInput, int]] = field(default_factory=dict)
    pid: int | None = None
    ready: bool = False
    dead: bool = False


class ProcessExecutor:
    """Run a batch on `processes` worker processes with `threads` threads each."""

    def __init__(self, processes: int, threads: int = 1, *,
                 max_attempts: int = DEFAULT_MAX_ATTEMPTS) -> None:
        if processes < 1 or threads < 1:
            raise ValueError("processes and threads must be at least 1")
        self.processes = processes
        self.threads = threads
        self.max_attempts = max_attempts
        self.workers_started = 0
        self.workers_lost = 0
        self.disk_cache_hits = 0
        self._workers: list[_Worker] = []
        self._lock = threading.Lock()
        self._ctx = mp.get_context("spawn")

    def describe(self) -> str:
        return f"{self.processes} process(es) x {self.threads} thread(s)"

    def worker_pids(self) -> list[int]:
        """The pids of the live, ready workers (for monitoring, and for tests
        that kill one)."""
        with self._lock:
            return [w.pid for w in self._workers if w.ready and not w.dead and w.pid]

    def run(self, spec: WorkerSpec, jobs: Sequence[BatchInput], emit: Emit,
            stop: threading.Event) -> None:
        if not jobs:
            return
        spec = WorkerSpec(spec.config, spec.wasm, spec.name, self.threads, spec.transcripts)
        dispatch = Dispatch(jobs, emit, self.max_attempts)
        start_failures = 0
        try:
            for _ in range(min(self.processes, len(jobs))):
                self._spawn(spec)
            while not dispatch.idle and not stop.is_set():
                for worker in self._live():
                    self._feed(worker, dispatch)
                watched: dict[Any, _Worker] = {}
                for worker in self._live():
                    watched[worker.results] = worker
                    watched[worker.process.sentinel] = worker
                for ready in wait(list(watched), timeout=_POLL_S):
                    worker = watched[ready]
                    self._drain(worker, dispatch)  # results sent before a death count
                    if isinstance(ready, int):  # a process sentinel: it exited
                        worker.dead = True
                for worker in [w for w in self._live_or_dead() if w.dead]:
                    start_failures = 0 if worker.ready else start_failures + 1
                    if start_failures >= _MAX_START_FAILURES:
                        raise WorkerError("batch worker processes exit before they are ready "
                                         f"(exit code {worker.process.exitcode})")
                    self._bury(worker, dispatch)
                    if dispatch.has_pending or dispatch.running:
                        self._spawn(spec)
        finally:
            self._shutdown()

    # ---- internals ---------------------------------------------------------

    def _live(self) -> list[_Worker]:
        with self._lock:
            return [w for w in self._workers if not w.dead]

    def _live_or_dead(self) -> list[_Worker]:
        with self._lock:
            return list(self._workers)

    def _spawn(self, spec: WorkerSpec) -> None:
        task_r, task_w = self._ctx.Pipe(duplex=False)
        result_r, result_w = self._ctx.Pipe(duplex=False)
        process = self._ctx.Process(target=_worker_main, args=(spec, task_r, result_w),
                                    name="spearpy-batch-worker", daemon=True)
        process.start()
        # The child holds its own ends: closing ours lets each side see EOF
        # when the other goes away.
        task_r.close()
        result_w.close()
        with self._lock:
            self._workers.append(_Worker(process, task_w, result_r))
            self.workers_started += 1

    def _feed(self, worker: _Worker, dispatch: Dispatch) -> None:
        while len(worker.running) < self.threads:
            taken = dispatch.take()
            if taken is None:
                return
            job, attempt = taken
            worker.running[job.index] = (job, attempt)
            try:
                worker.tasks.send(("run", job.index, job, attempt))
            except OSError:
                worker.dead = True  # its input comes back when it is buried
                return

    def _drain(self, worker: _Worker, dispatch: Dispatch) -> None:
        """Take in everything the worker has sent (also after it died)."""
        try:
            while worker.results.poll():
                self._handle(worker, worker.results.recv(), dispatch)
        except (EOFError, OSError):
            worker.dead = True

    def _handle(self, worker: _Worker, message: tuple[Any, ...], dispatch: Dispatch) -> None:
        kind = message[0]
        if kind == "result":
            entry = worker.running.pop(message[1], None)
            if entry is not None:
                dispatch.finished(message[2])
        elif kind == "ready":
            worker.ready, worker.pid = True, message[1]
            if message[2]:
                self.disk_cache_hits += 1
        elif kind == "fatal":
            raise WorkerError(f"a batch worker could not start: {message[1]}")

    def _bury(self, worker: _Worker, dispatch: Dispatch) -> None:
        worker.process.join(_POLL_S)
        why = f"worker process exited with code {worker.process.exitcode}"
        for job, attempt in worker.running.values():
            dispatch.lost(job, attempt, why)
        worker.running.clear()
        with self._lock:
            self._workers.remove(worker)
            if worker.ready:
                self.workers_lost += 1
        worker.tasks.close()
        worker.results.close()

    def _shutdown(self) -> None:
        workers = self._live_or_dead()
        for worker in workers:
            with contextlib.suppress(OSError):
                worker.tasks.send(("stop",))
            worker.tasks.close()
        for worker in workers:
            worker.process.join(_STOP_GRACE_S)
            if worker.process.is_alive():
                worker.process.kill()
                worker.process.join()
            worker.results.close()
        with self._lock:
            self._workers.clear()
