"""Batch executor: worker processes, each with a warm Host and a few threads.

The parent hands every worker at most `threads` inputs at a time over a pipe
and remembers which; a worker that dies (OOM killer, a crash in native code,
`kill -9`) is replaced and its unanswered inputs go back to the queue (see
dispatch.py). Workers are fresh interpreters (worker.py): the parent runs
threads (epoch ticker, HTTP pools) that `fork` would copy mid-use, and
multiprocessing's `spawn` would re-run the embedder's main script.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import pickle
import subprocess
import sys
import tempfile
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from pathlib import Path
from typing import Any

from spearpy.batch.dispatch import DEFAULT_MAX_ATTEMPTS, Dispatch, Emit
from spearpy.batch.jobs import BatchInput, WorkerError
from spearpy.batch.spec import WorkerSpec

# How often the parent looks up from its pipes to notice a stop request.
_POLL_S = 0.1
# A worker still alive this long after being told to stop is killed.
_STOP_GRACE_S = 10.0
# Workers dying before they are ready this many times in a row means they
# cannot start at all (bad config, unloadable module): fail the batch.
_MAX_START_FAILURES = 3


# ---- the parent's view of one worker --------------------------------------------


@dataclass(eq=False)
class _Worker:
    process: subprocess.Popen[bytes]
    tasks: Connection
    results: Connection
    running: dict[int, tuple[BatchInput, int]] = field(default_factory=dict)
    ready: bool = False
    dead: bool = False


class ProcessExecutor:
    """Run a batch on `processes` worker processes with `threads` threads each."""

    in_process = False

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
        self._spec_fd = -1  # the spec file while run() runs: see there

    def describe(self) -> str:
        return f"{self.processes} process(es) x {self.threads} thread(s)"

    def worker_pids(self) -> list[int]:
        """The pids of the live worker processes, started or still starting
        (for monitoring, and for tests that kill them)."""
        with self._lock:
            return [w.process.pid for w in self._workers if not w.dead]

    def run(self, spec: WorkerSpec, jobs: Sequence[BatchInput], emit: Emit,
            stop: threading.Event) -> None:
        if not jobs:
            return
        spec = dataclasses.replace(spec, threads=self.threads)
        dispatch = Dispatch(jobs, emit, self.max_attempts)
        start_failures = 0
        # Workers read the spec (with the module's bytes) from a file: a pipe
        # would block this loop until each new worker got round to it. The
        # file has no name (O_TMPFILE, or unlinked at once), so a batch killed
        # with SIGKILL, which runs no cleanup, leaves nothing in the temp
        # directory: the kernel frees it with the last process holding it.
        with tempfile.TemporaryFile(prefix="spearpy-batch-") as spec_file:
            spec_file.write(pickle.dumps(spec))
            spec_file.flush()
            self._spec_fd = spec_file.fileno()
            try:
                for _ in range(min(self.processes, len(jobs))):
                    self._spawn()
                while not dispatch.idle and not stop.is_set():
                    for worker in self._live():
                        self._feed(worker, dispatch)
                    watched: dict[Any, _Worker] = {w.results: w for w in self._live()}
                    for ready in wait(list(watched), timeout=_POLL_S):
                        # Takes in what it sent before dying too; EOF = it exited.
                        self._drain(watched[ready], dispatch)
                    for worker in [w for w in self._live_or_dead() if w.dead]:
                        start_failures = 0 if worker.ready else start_failures + 1
                        code = self._bury(worker, dispatch)
                        if start_failures >= _MAX_START_FAILURES:
                            raise WorkerError("batch worker processes exit before they are "
                                              f"ready (exit code {code})")
                        if dispatch.has_pending or dispatch.running:
                            self._spawn()
            finally:
                self._shutdown()

    # ---- internals ---------------------------------------------------------

    def _live(self) -> list[_Worker]:
        with self._lock:
            return [w for w in self._workers if not w.dead]

    def _live_or_dead(self) -> list[_Worker]:
        with self._lock:
            return list(self._workers)

    def _spawn(self) -> None:
        process, tasks, results = spawn_worker("spearpy.batch.worker", self._spec_fd)
        worker = _Worker(process, tasks, results)
        with self._lock:
            self._workers.append(worker)
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
            worker.ready = True
            if message[2]:
                self.disk_cache_hits += 1
        elif kind == "fatal":
            raise WorkerError(f"a batch worker could not start: {message[1]}")

    def _bury(self, worker: _Worker, dispatch: Dispatch) -> int | None:
        code = reap(worker.process, _STOP_GRACE_S)
        why = f"worker process exited with code {code}"
        for job, attempt in worker.running.values():
            dispatch.lost(job, attempt, why)
        worker.running.clear()
        with self._lock:
            self._workers.remove(worker)
            if worker.ready:
                self.workers_lost += 1
        worker.tasks.close()
        worker.results.close()
        return code

    def _shutdown(self) -> None:
        workers = self._live_or_dead()
        for worker in workers:
            with contextlib.suppress(OSError):
                worker.tasks.send(("stop",))
            worker.tasks.close()
        for worker in workers:
            reap(worker.process, _STOP_GRACE_S)
            worker.results.close()
        with self._lock:
            self._workers.clear()


def spawn_worker(module: str, spec_fd: int
                 ) -> tuple[subprocess.Popen[bytes], Connection, Connection]:
    """`python -m MODULE SPEC_FD TASK_FD RESULT_FD`: the process, the pipe to
    send it tasks and the pipe it answers on (also used by spearpy serve)."""
    task_r, task_w = os.pipe()
    result_r, result_w = os.pipe()
    try:
        process = subprocess.Popen(
            [sys.executable, "-m", module, str(spec_fd), str(task_r), str(result_w)],
            pass_fds=(spec_fd, task_r, result_w), stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL, env=worker_env())
    except BaseException:
        for fd in (task_r, task_w, result_r, result_w):
            os.close(fd)
        raise
    # The child holds its own ends: closing ours lets each side see EOF
    # when the other goes away.
    os.close(task_r)
    os.close(result_w)
    return process, Connection(task_w, readable=False), Connection(result_r, writable=False)


def reap(process: subprocess.Popen[bytes], grace: float) -> int | None:
    """Wait for a worker to exit, killing it after `grace` seconds."""
    try:
        return process.wait(grace)
    except subprocess.TimeoutExpired:
        process.kill()
        return process.wait()


def worker_env() -> dict[str, str]:
    """This environment, with spearpy importable even when the embedder put
    it on sys.path by hand rather than installing it."""
    import spearpy

    root = str(Path(spearpy.__file__).resolve().parent.parent)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    return env
