"""Where a run executes: threads of this process's Host, worker processes,
or a Ray cluster (docs/serve.md, "Executors").

RunManager hands an executor each run with two callbacks: `on_event` for
every event (from any thread, in order) and `on_end` once, with the run's
result or the error that stopped it before it started. Everything else (the
store, the subscribers, redaction, metrics) stays in the service's process,
whichever executor ran the guest.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from spearpy.observe.events import EventSink
from spearpy.outcome import RunResult, exit_code_for

if TYPE_CHECKING:
    from spearpy.host import Host, LoadedModule

OnEnd = Callable[[RunResult | None, BaseException | None], None]
_log = logging.getLogger("spearpy.serve")


@dataclass(frozen=True, slots=True)
class RunJob:
    """One run as it travels to a worker: picklable, no Host objects."""

    key: str  # the service's run id
    module: str
    sha256: str
    args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    stdin: str | None = None
    limits: dict[str, Any] = field(default_factory=dict)
    model: str | None = None
    backend: str | None = None


class Executor(Protocol):
    name: str  # what a run's record says it ran on: "threads", "processes", "ray"
    # Whether runs can have user streams: their hub lives in this process.
    streams: bool

    def place(self, module: LoadedModule) -> Executor:
        """The executor this module's run goes to: itself, or for `auto`
        one of those it holds. RunManager asks once per run and submits there."""
        ...

    def start(self) -> None: ...

    def submit(self, job: RunJob, wasm: bytes, host: Host, module: LoadedModule,
               cancel: threading.Event, on_event: EventSink, on_end: OnEnd) -> None: ...

    def cancel(self, key: str) -> None: ...

    def close(self) -> None: ...


def workers_lost(executor: Executor) -> int:
    """Workers (processes, actors) of this executor that died so far."""
    inner = getattr(executor, "processes", executor)  # auto: its processes
    lost: int = getattr(inner, "workers_lost", 0)
    return lost


def worker_lost(message: str) -> RunResult:
    return RunResult(run_id="", exit_code=exit_code_for("worker_lost"), outcome="worker_lost",
                     message=message)


class ThreadRuns:
    """Runs on a bounded pool of threads of the service's own Host: the
    compiled modules, the engine and the connection pools are shared, and
    wasmtime and httpx release the GIL while the guest computes or waits."""

    name = "threads"
    streams = True

    def __init__(self, threads: int) -> None:
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix="spearpy-serve-run")

    def place(self, module: LoadedModule) -> ThreadRuns:
        return self

    def start(self) -> None:
        pass

    def submit(self, job: RunJob, wasm: bytes, host: Host, module: LoadedModule,
               cancel: threading.Event, on_event: EventSink, on_end: OnEnd) -> None:
        def execute() -> None:
            result: RunResult | None = None
            error: BaseException | None = None
            try:
                result = host.run(module, job.args, env=job.env or None, stdin=job.stdin,
                                  limits=job.limits or None, on_event=on_event, cancel=cancel,
                                  capture_output=True)
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
    # execute() catches what a run raises; this is a bug in the service itself.
    exc = future.exception()
    if exc is not None:
        _log.error("a run's worker failed", exc_info=exc)
