"""`--executor auto`, the CLI's default: each run goes where it runs best.

Worker processes for most runs: each has a GIL of its own, so the service's
event loop, store and event streams never queue behind guests for the
interpreter (bench `SV`, docs/serve.md "How runs execute"). Threads of the
service's own Host for the runs that need something only this process has:
a module importing a user stream hostcall (its hub sits beside the routes'
WebSocket) or the microphone (whose `user_stream` source reads that hub).
While the workers start, and if they cannot, runs stay on the threads: the
service answers from its first second.
"""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING

from spearpy.executors.base import ExecutorError, OnEnd, RunJob
from spearpy.serve.executors import Executor, ThreadRuns
from spearpy.serve.procs import ProcessRuns

if TYPE_CHECKING:
    from spearpy.host import Host, LoadedModule
    from spearpy.observe.events import EventSink

_IN_SERVICE_PREFIXES = ("user_stream_", "mic_")
_log = logging.getLogger("spearpy.serve")


def needs_service_process(module: LoadedModule) -> bool:
    """Whether the module imports a hostcall whose other end lives in the
    service's process (user streams, and the microphone that can read one)."""
    return any((item.name or "").startswith(_IN_SERVICE_PREFIXES)
               for item in module.module.imports)


class AutoRuns:
    """Threads and worker processes side by side; `place` picks per module."""

    name = "auto"
    streams = True  # for the runs placed on the threads

    def __init__(self, threads: ThreadRuns, processes: ProcessRuns) -> None:
        self.threads = threads
        self.processes = processes
        self._needs: dict[str, bool] = {}  # module sha256 -> needs the service's process
        self._starter: threading.Thread | None = None
        # The threads take runs whatever befalls the workers.
        self.failure: ExecutorError | None = None

    @property
    def workers_lost(self) -> int:
        return self.processes.workers_lost

    def place(self, module: LoadedModule) -> Executor:
        needs = self._needs.get(module.sha256)
        if needs is None:
            needs = self._needs[module.sha256] = needs_service_process(module)
        return self.threads if needs or not self.processes.ready() else self.processes

    def start(self) -> None:
        self.threads.start()
        self._starter = threading.Thread(target=self._start_workers, daemon=True,
                                         name="spearpy-serve-workers-start")
        self._starter.start()

    def _start_workers(self) -> None:
        try:
            self.processes.start()
        except Exception as exc:
            _log.error("serve: worker processes did not start (%s); every run stays on "
                       "the service's threads", exc)

    def submit(self, job: RunJob, wasm: bytes, host: Host | None, module: LoadedModule | None,
               cancel: threading.Event, on_event: EventSink | None, on_end: OnEnd) -> None:
        # RunManager submits to what `place` returned; this is for callers
        # that hand the auto executor a run directly.
        if module is None:
            raise ValueError("the auto executor places runs by their loaded module")
        self.place(module).submit(job, wasm, host, module, cancel, on_event, on_end)

    def cancel(self, key: str) -> None:
        self.processes.cancel(key)  # a thread's run needs only its cancel event

    def close(self) -> None:
        if self._starter is not None:
            self._starter.join()  # bounded by the workers' ready timeout
        self.processes.close()
        self.threads.close()
