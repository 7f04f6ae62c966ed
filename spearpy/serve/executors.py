"""Where a run executes: the shared executors (spearpy/executors: threads of
this process's Host, worker processes, or a Ray cluster), as the service
places runs on them (docs/serve.md, "Executors").

RunManager hands an executor each run with two callbacks: `on_event` for
every event (from any thread, in order) and `on_end` once, with the run's
result or the error that stopped it before it started. Everything else (the
store, the subscribers, redaction, metrics) stays in the service's process,
whichever executor ran the guest.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Protocol, Self

from spearpy.executors import base, threads
from spearpy.executors.base import OnEnd, RunJob

if TYPE_CHECKING:
    from spearpy.host import Host, LoadedModule
    from spearpy.observe.events import EventSink


class Executor(base.Executor, Protocol):
    # Whether runs can have user streams: their hub lives in this process.
    streams: bool

    def place(self, module: LoadedModule) -> Executor:
        """The executor this module's run goes to: itself, or for `auto`
        one of those it holds. RunManager asks once per run and submits there."""
        ...

    def submit(self, job: RunJob, wasm: bytes, host: Host | None, module: LoadedModule | None,
               cancel: threading.Event, on_event: EventSink | None, on_end: OnEnd) -> None: ...


class PlacedHere:
    """An executor that takes every module's runs itself."""

    def place(self, module: LoadedModule) -> Self:
        return self


class ThreadRuns(PlacedHere, threads.ThreadRuns):
    """Threads of the service's own Host: every run gets user streams."""

    streams = True


def workers_lost(executor: Executor) -> int:
    """Workers (processes, actors) of this executor that died so far."""
    return executor.workers_lost
