"""Batch executor: N threads in this process sharing one warm Host.

Right for guests that mostly wait on the model: wasmtime and httpx release
the GIL while they wait. Guests that make many short hostcalls contend for
the GIL instead; the process executor spreads those over cores.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING

from spearpy.batch.jobs import BatchInput, run_job

if TYPE_CHECKING:
    from spearpy.batch.dispatch import Emit
    from spearpy.batch.spec import WorkerSpec
    from spearpy.host import Host


class ThreadExecutor:
    """Run a batch on `threads` threads of this process."""

    in_process = True

    def __init__(self, threads: int, host: Host | None = None) -> None:
        if threads < 1:
            raise ValueError("threads must be at least 1")
        self.threads = threads
        self._host = host  # an embedder's own Host; else one is built from the spec

    def describe(self) -> str:
        return f"{self.threads} thread(s) in this process"

    def run(self, spec: WorkerSpec, jobs: Sequence[BatchInput], emit: Emit,
            stop: threading.Event) -> None:
        if not jobs:
            return
        if self._host is not None:
            host, owned = self._host, False
            module = host.load(spec.wasm, spec.name)
        else:
            (host, module), owned = spec.warm_host(), True
        queue = iter(jobs)
        lock = threading.Lock()

        def work() -> None:
            while not stop.is_set():
                with lock:
                    job = next(queue, None)
                if job is None:
                    return
                # `stop` doubles as every run's cancel event: Ctrl-C ends the
                # guests in flight instead of waiting for them.
                emit(run_job(host, module, job, attempt=1, cancel=stop,
                             transcripts=spec.transcripts, settings=spec.settings))

        workers = [threading.Thread(target=work, name=f"spearpy-batch-{i}", daemon=True)
                   for i in range(min(self.threads, len(jobs)))]
        try:
            for thread in workers:
                thread.start()
            for thread in workers:
                thread.join()
        except BaseException:
            stop.set()
            for thread in workers:
                thread.join()
            raise
        finally:
            if owned:
                host.close()
