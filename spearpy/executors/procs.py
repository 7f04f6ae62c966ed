"""Runs on worker processes, each with its own Hosts (and GIL), a few runs
at a time on its threads.

Per worker, one thread sends it work (a pipe write never blocks the caller,
even while the worker is still starting) and one reads what it sends back:
events as they happen, then each run's end. A worker that dies (OOM killer,
a crash in native code, SIGKILL) ends each of its runs as `worker_lost` with
a message naming its pid and how it died, and is replaced; nobody waits for
it. A run with a journal (RunJob.journal) is resumed from it on another
worker instead, at most `max_resumes` times (docs/durable.md: the journal
answers what the lost worker was told, so no completion it journaled is
asked again); its `on_event` gets a RUN_RESUMED event first. A message the
parent cannot unpickle (a class only the worker has) ends only the runs it
was about, as host_error (unreadable.py); one that names no run stops the
worker, which then ends its runs as a death does, saying why. So does a
worker alive but answering nothing (procs_watch.py): killed once a run on it
outlives its deadline by `grace`, or once it is silent under runs for
`silence` and does not answer a ping. Workers are
fresh interpreters (worker.py): the parent runs threads (epoch ticker, HTTP
pools) that `fork` would copy mid-use.
"""

from __future__ import annotations

import logging
import os
import pickle
import queue
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING, Any

from spearpy.executors.base import ExecutorError, OnEnd, RunJob, worker_lost
from spearpy.executors.procs_watch import ProcsWatch, Quiet, ends_by
from spearpy.executors.resumes import end_journal, resumed_event, resumed_job
from spearpy.executors.spawn import died, reap, spawn_worker
from spearpy.executors.unreadable import sort_out
from spearpy.executors.watch import GRACE_S, SILENCE_S, check_bound, run_timeout
from spearpy.outcome import Outcome, RunResult

if TYPE_CHECKING:
    from spearpy.config import HostConfig
    from spearpy.host import Host, LoadedModule
    from spearpy.observe.events import EventSink

# A worker still alive this long after being told to stop is killed.
_STOP_GRACE_S = 10.0
_READY_TIMEOUT_S = 120.0
# Replacements dying before they are ready this many times in a row means
# workers cannot start any more (the module's config broke, no memory left):
# the executor fails instead of starting workers forever.
_MAX_START_FAILURES = 3
# A journaled run whose worker died is resumed on another this many times;
# a run that keeps killing its workers then ends worker_lost.
MAX_RESUMES = 2
_log = logging.getLogger("spearpy.executors")


@dataclass(eq=False)
class _Run:
    job: RunJob
    wasm: bytes  # held for a resume on another worker, which may not have the module
    cancel: threading.Event
    on_event: EventSink | None
    on_end: OnEnd
    resumes: int = 0
    timeout: float | None = None  # as its worker applies it
    ends_by: float | None = None  # when it is taken for stuck (procs_watch.py)


@dataclass(eq=False)
class _Worker:
    process: subprocess.Popen[bytes]
    tasks: Connection
    results: Connection
    outbox: queue.SimpleQueue[tuple[Any, ...] | None] = field(
        default_factory=queue.SimpleQueue)
    runs: dict[str, _Run] = field(default_factory=dict)
    modules: set[str] = field(default_factory=set)  # sha256 of the modules it was sent
    ready: threading.Event = field(default_factory=threading.Event)
    fatal: str | None = None  # why it could not start, as it said
    dead: bool = False
    born: float = field(default_factory=time.monotonic)
    frames: int = 0  # read from it so far: what its watch sees of it
    quiet: Quiet = field(default_factory=Quiet)
    stopping: str | None = None  # why the parent killed it, as its runs will say
    # Runs its watch ended `timeout`, told once it is dead (_bury).
    overdue: list[tuple[_Run, RunResult]] = field(default_factory=list)


class ProcessRuns:
    name = "processes"

    def __init__(self, config: HostConfig, max_concurrent: int,
                 workers: int | None = None, max_resumes: int = MAX_RESUMES, *,
                 grace: float = GRACE_S, silence: float = SILENCE_S) -> None:
        """`grace`, `silence`: how long a run may go on past its deadline, and
        a worker under runs stay silent, before the worker is taken for hung."""
        if max_concurrent < 1 or (workers is not None and workers < 1):
            raise ValueError("max_concurrent and workers must be at least 1")
        if max_resumes < 0:
            raise ValueError("max_resumes must not be negative")
        check_bound("grace", grace)
        check_bound("silence", silence)
        self.max_resumes = max_resumes
        self.workers = workers or max(1, min(os.cpu_count() or 1, max_concurrent))
        self.threads = -(-max_concurrent // self.workers)
        self._lock = threading.Lock()
        self._workers: list[_Worker] = []  # the one list, for ever: the watch holds it
        self._config = config.model_dump()
        self._spec = pickle.dumps((self._config, self.threads))
        self._watch = ProcsWatch(self._lock, self._workers, grace, silence, _READY_TIMEOUT_S)
        self._spec_file: Any = None
        self._started = False
        self._closing = False
        self._start_failures = 0
        self.workers_started = 0
        self.workers_lost = 0
        self.disk_cache_hits = 0  # modules a worker found compiled in the disk cache
        self.failure: ExecutorError | None = None

    def worker_pids(self, busy: bool = False) -> list[int]:
        """The live workers' pids (`busy`: only those running a run), for
        monitoring and for tests that kill them."""
        with self._lock:
            return [w.process.pid for w in self._workers
                    if not w.dead and (w.runs or not busy)]

    def ready(self) -> bool:
        """Whether a worker has started and can take a run now."""
        with self._lock:
            return any(w.ready.is_set() and not w.dead for w in self._workers)

    def start(self) -> None:
        # The spec in a file without a name: a worker reads it when it is
        # ready to (a pipe would hold the writer until then), and a SIGKILLed
        # parent leaves nothing in the temp directory. Open for the
        # executor's life: a replacement worker reads it too.
        self._spec_file = tempfile.TemporaryFile(prefix="spearpy-worker-")  # noqa: SIM115
        self._spec_file.write(self._spec)
        self._spec_file.flush()
        started = [self._spawn() for _ in range(self.workers)]
        for worker in started:
            if not worker.ready.wait(_READY_TIMEOUT_S) or worker.dead:
                why = worker.fatal or "see its stderr"
                raise ExecutorError(f"a worker process did not start ({why})")
        self._started = True
        self._watch.start()

    def submit(self, job: RunJob, wasm: bytes, host: Host | None, module: LoadedModule | None,
               cancel: threading.Event, on_event: EventSink | None, on_end: OnEnd) -> None:
        self._place(_Run(job, wasm, cancel, on_event, on_end))

    def _place(self, run: _Run) -> None:
        job = run.job
        run.timeout = run_timeout(job.limits, self._config)
        with self._lock:
            live = [w for w in self._workers if not w.dead]
            if not live or self._closing:
                worker = None
            else:
                worker = min(live, key=lambda w: (not w.ready.is_set(), len(w.runs)))
                run.ends_by = ends_by(run.timeout, self._watch.grace, worker.runs.values(),
                                      self.threads, time.monotonic())
                worker.runs[job.key] = run
                sent = job.sha256 in worker.modules
                worker.modules.add(job.sha256)
        if worker is None:
            run.on_end(worker_lost("no worker process is running"), None)
            return
        worker.outbox.put(("run", job, None if sent else run.wasm, run.on_event is not None))
        if run.cancel.is_set():
            self.cancel(job.key)

    def cancel(self, key: str) -> None:
        with self._lock:
            for worker in self._workers:
                if key in worker.runs:
                    worker.outbox.put(("cancel", key))

    def close(self) -> None:
        with self._lock:
            self._closing = True
            workers = list(self._workers)
        self._watch.stop()
        for worker in workers:
            worker.outbox.put(("stop",))
            worker.outbox.put(None)
        for worker in workers:
            reap(worker.process, _STOP_GRACE_S)
        if self._spec_file is not None:
            self._spec_file.close()
            self._spec_file = None

    # ---- internals ---------------------------------------------------------

    def _spawn(self) -> _Worker:
        process, tasks, results = spawn_worker("spearpy.executors.worker",
                                               self._spec_file.fileno())
        worker = _Worker(process, tasks, results)
        with self._lock:
            self._workers.append(worker)
            self.workers_started += 1
        for target, name in ((self._send_loop, "send"), (self._read_loop, "read")):
            threading.Thread(target=target, args=(worker,), daemon=True,
                             name=f"spearpy-worker-{process.pid}-{name}").start()
        return worker

    def _send_loop(self, worker: _Worker) -> None:
        while True:
            message = worker.outbox.get()
            if message is None:
                break
            try:
                worker.tasks.send(message)
            except OSError:
                break  # it died: the read loop ends its runs
        worker.tasks.close()

    def _read_loop(self, worker: _Worker) -> None:
        stopped: str | None = None  # why the worker is stopped, when its pipe cannot be read on
        try:
            while stopped is None:
                # No copy more than recv(): getvalue() hands over the buffer
                # the frame was read into. Kept for a second reading.
                data = worker.results.recv_bytes()
                worker.frames += 1
                try:
                    message = pickle.loads(data)
                except BaseException as exc:  # a daemon thread: nothing else reaches it this way
                    message, stopped = sort_out(data, exc)
                try:
                    self._handle(worker, message)
                except Exception:  # the caller's side failed: the worker is fine
                    _log.exception("handling a worker's message failed")
        except (EOFError, OSError):
            pass  # it exited (or was killed)
        finally:
            worker.results.close()
            if stopped is not None:
                self._watch.kill(worker, stopped)
            self._bury(worker, worker.stopping)

    def _unreadable_run(self, worker: _Worker, key: str, *, ended: bool, why: str) -> None:
        """End a run whose message the parent could not read, and stop it on
        the worker if it still runs there (nothing more of it would be read)."""
        with self._lock:
            run = worker.runs.pop(key, None)
        if run is None:
            return  # ended already
        if not ended:
            worker.outbox.put(("cancel", key))
        message = (f"a message about this run from its worker process (pid "
                   f"{worker.process.pid}) could not be read: {why}")
        _log.error("run %s: %s", key, message)
        run.on_end(RunResult.ended_as(Outcome.HOST_ERROR.value, message), None)

    def _handle(self, worker: _Worker, message: tuple[Any, ...]) -> None:
        kind = message[0]
        if kind == "batch":  # messages that came together (worker._Combined), in order
            for each in message[1]:
                try:
                    self._handle(worker, each)
                except Exception:  # as _read_loop: one failure must not drop the rest
                    _log.exception("handling a worker's message failed")
        elif kind == "event":
            run = worker.runs.get(message[1])
            if run is not None and run.on_event is not None:
                run.on_event(message[2])
        elif kind == "end":
            with self._lock:
                run = worker.runs.pop(message[1], None)
            if run is not None:
                error = RuntimeError(message[3]) if message[3] is not None else None
                run.on_end(message[2], error)
        elif kind == "unreadable":  # put in its message's place by sort_out
            self._unreadable_run(worker, message[1], ended=message[2], why=message[3])
        elif kind == "loaded":
            with self._lock:
                self.disk_cache_hits += bool(message[2])
        elif kind == "ready":
            with self._lock:
                self._start_failures = 0
            worker.ready.set()
        elif kind == "fatal":
            worker.fatal = message[1]
            _log.error("a worker process could not start: %s", message[1])

    def _bury(self, worker: _Worker, stopped: str | None = None) -> None:
        """After the worker's pipe closed: replace it, then end its runs
        (their caller may submit them again: the replacement takes them).
        `stopped`: why the parent stopped it, said instead of how it died."""
        with self._lock:
            worker.dead = True  # before the reap: no new run goes to it meanwhile
        code = reap(worker.process, _STOP_GRACE_S)
        worker.outbox.put(None)
        with self._lock:
            self._workers.remove(worker)
            runs, worker.runs = worker.runs, {}
            overdue, worker.overdue = worker.overdue, []
            if not worker.ready.is_set():
                self._start_failures += 1
            replace = self._started and not self._closing and self.failure is None
            if replace and self._start_failures >= _MAX_START_FAILURES:
                replace = False
                self.failure = ExecutorError(
                    f"worker processes exit before they are ready ({died(code)}"
                    f"{': ' + worker.fatal if worker.fatal else ''})")
            if runs or replace:
                self.workers_lost += 1
        worker.ready.set()  # start() waits on it: it is over either way
        if replace:
            try:
                self._spawn()
            except OSError:
                _log.exception("a worker process could not be replaced")
        for run, result in overdue:
            try:
                end_journal(run.job, result)  # its writer lock died with the worker
            except Exception:
                _log.exception("ending a stuck run's journal failed")
            try:
                run.on_end(result, None)  # told whatever came of its journal
            except Exception:
                _log.exception("ending a stuck run failed")
        why = (f"the worker process (pid {worker.process.pid}) running this run "
               f"{died(code)} before the run ended" if stopped is None else
               f"the worker process (pid {worker.process.pid}) running this run was "
               f"stopped before the run ended: {stopped}")
        for run in runs.values():
            try:
                if self._resumable(run):
                    self._resume(run, why)
                else:
                    resumed = f" (resumed {run.resumes} times before)" if run.resumes else ""
                    run.on_end(worker_lost(why + resumed), None)
            except Exception:
                _log.exception("ending a lost worker's run failed")

    def _resumable(self, run: _Run) -> bool:
        with self._lock:
            going = not self._closing and self.failure is None
        return going and run.job.journal is not None and not run.cancel.is_set() and \
            run.resumes < self.max_resumes

    def _resume(self, run: _Run, why: str) -> None:
        """The lost run again on another worker, from its journal: the dead
        worker's writer lock on it went with the process."""
        job = resumed_job(run.job)  # a fork goes on with its own journal (resumes.py)
        if isinstance(job, str):
            run.on_end(worker_lost(f"{why}; {job}"), None)
            return
        run.job = job
        run.resumes += 1
        _log.warning("%s; resuming run %s from its journal (%d of at most %d)", why,
                     run.job.key, run.resumes, self.max_resumes)
        if run.on_event is not None:
            run.on_event(resumed_event(why, run.resumes))
        self._place(run)
