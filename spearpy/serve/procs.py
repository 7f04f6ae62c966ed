"""The process executor: runs on worker processes, each with its own Host
(and GIL), a few runs at a time on its threads.

Per worker, one thread sends it work (a pipe write never blocks the event
loop, even while the worker is still starting) and one reads what it sends
back: events as they happen, then the run's end. A worker that dies (OOM
killer, a crash in native code, SIGKILL) ends each of its runs as
`worker_lost` with a message saying so, and is replaced; the service never
waits for it. Workers are started as in `spearpy batch` (procs.py there).
"""

from __future__ import annotations

import contextlib
import logging
import os
import pickle
import queue
import signal
import subprocess
import tempfile
import threading
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING, Any

from spearpy.batch.procs import reap, spawn_worker
from spearpy.observe.events import EventSink
from spearpy.serve.executors import OnEnd, RunJob, worker_lost

if TYPE_CHECKING:
    from spearpy.config import HostConfig
    from spearpy.host import Host, LoadedModule

_STOP_GRACE_S = 10.0
_READY_TIMEOUT_S = 120.0
_log = logging.getLogger("spearpy.serve")


@dataclass(eq=False)
class _Run:
    on_event: EventSink
    on_end: OnEnd


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
    dead: bool = False


class ProcessRuns:
    name = "processes"
    streams = False  # a user stream's hub would live in the worker, out of the routes' reach

    def __init__(self, config: HostConfig, max_concurrent: int,
                 workers: int | None = None) -> None:
        self.workers = workers or max(1, min(os.cpu_count() or 1, max_concurrent))
        self.threads = -(-max_concurrent // self.workers)
        self._spec = pickle.dumps((config.model_dump(), self.threads))
        self._spec_file: Any = None
        self._lock = threading.Lock()
        self._workers: list[_Worker] = []
        self._closing = False
        self.workers_lost = 0

    def worker_pids(self, busy: bool = False) -> list[int]:
        """The live workers' pids (`busy`: only those running a run), for
        monitoring and for tests that kill them."""
        with self._lock:
            return [w.process.pid for w in self._workers
                    if not w.dead and (w.runs or not busy)]

    def place(self, module: LoadedModule) -> ProcessRuns:
        return self

    def ready(self) -> bool:
        """Whether a worker has started and can take a run now."""
        with self._lock:
            return any(w.ready.is_set() and not w.dead for w in self._workers)

    def start(self) -> None:
        # The spec in a file without a name (as batch does): a worker reads it
        # when it is ready to, and a SIGKILLed service leaves nothing behind.
        # Open for the executor's life (a replacement worker reads it too).
        self._spec_file = tempfile.TemporaryFile(prefix="spearpy-serve-")  # noqa: SIM115
        self._spec_file.write(self._spec)
        self._spec_file.flush()
        started = [self._spawn() for _ in range(self.workers)]
        for worker in started:
            if not worker.ready.wait(_READY_TIMEOUT_S) or worker.dead:
                raise RuntimeError("a serve worker process did not start (see its stderr)")

    def submit(self, job: RunJob, wasm: bytes, host: Host, module: LoadedModule,
               cancel: threading.Event, on_event: EventSink, on_end: OnEnd) -> None:
        with self._lock:
            live = [w for w in self._workers if not w.dead]
            if not live or self._closing:
                worker = None
            else:
                worker = min(live, key=lambda w: (not w.ready.is_set(), len(w.runs)))
                worker.runs[job.key] = _Run(on_event, on_end)
                sent = job.sha256 in worker.modules
                worker.modules.add(job.sha256)
        if worker is None:
            on_end(worker_lost("no serve worker process is running"), None)
            return
        worker.outbox.put(("run", job, None if sent else wasm))
        if cancel.is_set():
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
        process, tasks, results = spawn_worker("spearpy.serve.worker",
                                               self._spec_file.fileno())
        worker = _Worker(process, tasks, results)
        with self._lock:
            self._workers.append(worker)
        for target, name in ((self._send_loop, "send"), (self._read_loop, "read")):
            threading.Thread(target=target, args=(worker,), daemon=True,
                             name=f"spearpy-serve-worker-{process.pid}-{name}").start()
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
        try:
            while True:
                message = worker.results.recv()
                try:
                    self._handle(worker, message)
                except Exception:  # the service's side failed: the worker is fine
                    _log.exception("serve: handling a worker's message failed")
        except (EOFError, OSError):
            pass  # it exited (or was killed)
        finally:
            worker.results.close()
            self._bury(worker)

    def _handle(self, worker: _Worker, message: tuple[Any, ...]) -> None:
        kind = message[0]
        if kind == "event":
            run = worker.runs.get(message[1])
            if run is not None:
                run.on_event(message[2])
        elif kind == "end":
            with self._lock:
                run = worker.runs.pop(message[1], None)
            if run is not None:
                error = RuntimeError(message[3]) if message[3] is not None else None
                run.on_end(message[2], error)
        elif kind == "ready":
            worker.ready.set()
        elif kind == "fatal":
            _log.error("a serve worker process could not start: %s", message[1])

    def _bury(self, worker: _Worker) -> None:
        """After the worker's pipe closed: end its runs, replace it."""
        code = reap(worker.process, _STOP_GRACE_S)
        worker.outbox.put(None)
        with self._lock:
            worker.dead = True
            self._workers.remove(worker)
            runs, worker.runs = worker.runs, {}
            replace = not self._closing and worker.ready.is_set()
            if runs or replace:
                self.workers_lost += 1
        worker.ready.set()  # start() waits on it: it is over either way
        why = (f"the worker process (pid {worker.process.pid}) running this run "
               f"{_died(code)} before the run ended")
        for run in runs.values():
            try:
                run.on_end(worker_lost(why), None)
            except Exception:
                _log.exception("serve: ending a lost worker's run failed")
        if replace:
            with contextlib.suppress(OSError):
                self._spawn()


def _died(code: int | None) -> str:
    if code is not None and code < 0:
        with contextlib.suppress(ValueError):
            return f"was killed by {signal.Signals(-code).name}"
    return f"exited with code {code}"
