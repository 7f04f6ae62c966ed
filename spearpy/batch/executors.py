"""Where a batch runs: the shared executors (spearpy/executors) with the
batch's layout and retries.

- ThreadExecutor: N threads in this process sharing one warm Host. Right for
  guests that mostly wait on the model: wasmtime and httpx release the GIL
  while they wait.
- ProcessExecutor: worker processes, each with a warm Host and a few
  threads: guests that make many short hostcalls spread over cores. The
  parent fills the disk cache first, so the workers load the module from it.
- RayExecutor: actors on a Ray cluster (the optional `[ray]` extra).

A worker that dies loses no input: its runs go back to the queue
(dispatch.py).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING

from spearpy.batch.dispatch import DEFAULT_MAX_ATTEMPTS, Emit, drive
from spearpy.executors.procs import ProcessRuns
from spearpy.executors.ray_runs import RayRuns
from spearpy.executors.threads import ThreadRuns

if TYPE_CHECKING:
    from spearpy.batch.jobs import BatchInput
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
        threads = min(self.threads, len(jobs))
        try:
            drive(ThreadRuns(threads), spec, jobs, emit, stop, capacity=threads,
                  local=(host, module))
        finally:
            if owned:
                host.close()


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
        self._runs: ProcessRuns | None = None  # the last run's: its workers and counts

    def describe(self) -> str:
        return f"{self.processes} process(es) x {self.threads} thread(s)"

    @property
    def workers_started(self) -> int:
        return self._runs.workers_started if self._runs else 0

    @property
    def workers_lost(self) -> int:
        return self._runs.workers_lost if self._runs else 0

    @property
    def disk_cache_hits(self) -> int:
        return self._runs.disk_cache_hits if self._runs else 0

    def worker_pids(self) -> list[int]:
        """The pids of the live worker processes, started or still starting
        (for monitoring, and for tests that kill them)."""
        return self._runs.worker_pids() if self._runs else []

    def run(self, spec: WorkerSpec, jobs: Sequence[BatchInput], emit: Emit,
            stop: threading.Event) -> None:
        if not jobs:
            return
        workers = min(self.processes, len(jobs))
        self._runs = ProcessRuns(spec.host_config(), workers * self.threads, workers)
        drive(self._runs, spec, jobs, emit, stop, capacity=workers * self.threads,
              max_attempts=self.max_attempts)


class RayExecutor:
    """Run a batch as Ray actor calls. `address`: a cluster address
    ("ray://host:10001", "host:6379"), "auto" (the cluster this machine is
    part of) or "local" (start a private single-machine cluster). One actor
    per CPU of the cluster (or `actors`), each running its share of
    `concurrency` on threads."""

    in_process = False

    def __init__(self, address: str, concurrency: int, *, actors: int | None = None,
                 max_attempts: int = DEFAULT_MAX_ATTEMPTS) -> None:
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        self.address = address
        self.concurrency = concurrency
        self.actors = actors
        self.max_attempts = max_attempts
        self.lost_runs = 0
        self._runs: RayRuns | None = None

    def describe(self) -> str:
        return f"Ray cluster {self.address} ({self.concurrency} concurrent)"

    def worker_pids(self) -> list[int]:
        return self._runs.worker_pids() if self._runs else []

    def run(self, spec: WorkerSpec, jobs: Sequence[BatchInput], emit: Emit,
            stop: threading.Event) -> None:
        if not jobs:
            return
        concurrency = min(self.concurrency, len(jobs))
        self._runs = RayRuns(self.address, spec.host_config(), concurrency, self.actors)
        self.lost_runs += drive(self._runs, spec, jobs, emit, stop, capacity=concurrency,
                                max_attempts=self.max_attempts)
