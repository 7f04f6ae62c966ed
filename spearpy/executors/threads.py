"""Runs on a bounded pool of threads of a Host in this process: the
compiled modules, the engine and the connection pools are shared, and
wasmtime and httpx release the GIL while the guest computes or waits.
Guests that make many short hostcalls contend for the GIL instead; worker
processes (procs.py) spread those over cores."""

from __future__ import annotations

import logging
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING

from spearpy.executors.base import ExecutorError, OnEnd, RunJob, run_on
from spearpy.outcome import RunResult

if TYPE_CHECKING:
    from spearpy.host import Host, LoadedModule
    from spearpy.observe.events import EventSink

_log = logging.getLogger("spearpy.executors")


class ThreadRuns:
    name = "threads"
    workers_lost = 0  # the threads die only with this process
    failure: ExecutorError | None = None

    def __init__(self, threads: int) -> None:
        if threads < 1:
            raise ValueError("threads must be at least 1")
        self.threads = threads
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix="spearpy-run")

    def start(self) -> None:
        pass  # the pool starts its threads as runs arrive

    def submit(self, job: RunJob, wasm: bytes, host: Host | None, module: LoadedModule | None,
               cancel: threading.Event, on_event: EventSink | None, on_end: OnEnd) -> None:
        if host is None or module is None:
            raise ValueError("the threads executor runs a module loaded in this process")

        def execute() -> None:
            result: RunResult | None = None
            error: BaseException | None = None
            try:
                result = run_on(host, module, job, cancel, on_event)
            except Exception as exc:  # Host.run raises only before the guest starts
                error = exc
            finally:
                on_end(result, error)

        self._pool.submit(execute).add_done_callback(_report_failure)

    def cancel(self, key: str) -> None:
        pass  # the run's cancel event, already set, is all a thread needs

    def close(self) -> None:
        self._pool.shutdown(wait=True)


def _report_failure(future: Future[None]) -> None:
    # execute() catches what a run raises; this is a bug in the caller's on_end.
    exc = future.exception()
    if exc is not None:
        _log.error("a run's on_end failed", exc_info=exc)
