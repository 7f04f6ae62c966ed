"""Batch executor on a Ray cluster (the optional `[ray]` extra).

One actor per CPU of the cluster (up to the batch's concurrency), each
holding a warm Host and running several inputs at once on threads. Actors
restart when their process or node dies; the inputs they were running go
back to the queue (dispatch.py), so a lost worker loses no input. Results are
the same records the local executors write.

Ray is imported only when this executor is used: `pip install spearpy[ray]`.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import os
import signal
import threading
import time
from collections.abc import Iterator, Sequence
from typing import Any

from spearpy.batch.dispatch import DEFAULT_MAX_ATTEMPTS, Dispatch, Emit
from spearpy.batch.jobs import BatchError, BatchInput, WorkerError, failure_record, run_job
from spearpy.batch.spec import WorkerSpec

_POLL_S = 0.1
# An actor still not back after this many ready() probes (~_POLL_S apart) is
# taken for gone for good: its node is lost and nothing can host it.
_MAX_FAILED_PROBES = 300


def import_ray() -> Any:
    try:
        import ray
    except ImportError as exc:
        raise BatchError("--ray needs Ray: pip install 'spearpy[ray]'") from exc
    return ray


class HostActor:
    """The body of a Ray actor: a warm Host that runs batch inputs."""

    def __init__(self, spec: WorkerSpec) -> None:
        self._spec = spec
        self._host, self._module = spec.warm_host()

    def ready(self) -> tuple[int, bool]:
        return os.getpid(), self._module.from_disk_cache

    def pid(self) -> int:
        return os.getpid()

    def run(self, job: BatchInput, attempt: int) -> dict[str, Any]:
        return run_job(self._host, self._module, job, attempt=attempt, cancel=None,
                       transcripts=self._spec.transcripts, settings=self._spec.settings)


class RayExecutor:
    """Run a batch as Ray actor calls. `address`: a cluster address
    ("ray://host:10001", "host:6379"), "auto" (the cluster this machine is
    part of) or "local" (start a private single-machine cluster)."""

    in_process = False

    def __init__(self, address: str, concurrency: int, *, actors: int | None = None,
                 max_attempts: int = DEFAULT_MAX_ATTEMPTS) -> None:
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        self.address = address
        self.concurrency = concurrency
        self.actors = actors
        self.max_attempts = max_attempts
        self.disk_cache_hits = 0
        self.lost_runs = 0
        self._handles: list[Any] = []
        self._lock = threading.Lock()
        self._spec_ref: Any = None

    def describe(self) -> str:
        return f"Ray cluster {self.address} ({self.concurrency} concurrent)"

    def worker_pids(self) -> list[int]:
        ray = import_ray()
        with self._lock:
            handles = list(self._handles)
        return [int(p) for p in ray.get([h.pid.remote() for h in handles])]

    def _connect(self, ray: Any) -> bool:
        """Connect (or start a local cluster); True if this call started Ray."""
        if ray.is_initialized():
            return False
        address = None if self.address == "local" else self.address
        try:
            with crash_handlers_kept():
                ray.init(address=address, include_dashboard=False, log_to_driver=False)
        except (ConnectionError, RuntimeError, ValueError) as exc:
            raise BatchError(f"cannot connect to the Ray cluster {self.address!r}: {exc}") from exc
        return True

    def run(self, spec: WorkerSpec, jobs: Sequence[BatchInput], emit: Emit,
            stop: threading.Event) -> None:
        if not jobs:
            return
        ray = import_ray()
        started = self._connect(ray)
        try:
            self._run(ray, spec, jobs, emit, stop)
        finally:
            with self._lock:
                handles, self._handles = self._handles, []
            for handle in handles:
                ray.kill(handle, no_restart=True)
            if started:
                with crash_handlers_kept():  # shutdown resets them too
                    ray.shutdown()

    def _start_actors(self, ray: Any, spec: WorkerSpec, jobs: int) -> tuple[list[Any], int]:
        cpus = int(ray.cluster_resources().get("CPU", 1)) or 1
        count = max(1, min(self.actors or cpus, self.concurrency, jobs))
        threads = -(-self.concurrency // count)
        spec = dataclasses.replace(spec, threads=threads)
        # One concurrency slot more than inputs handed out, so ready() and
        # pid() never queue behind busy runs.
        actor_class = ray.remote(num_cpus=1, max_restarts=-1, max_task_retries=0,
                                 max_concurrency=threads + 1)(HostActor)
        # Held for the whole batch: a restarting actor re-reads its arguments.
        self._spec_ref = ray.put(spec)
        handles = [actor_class.remote(self._spec_ref) for _ in range(count)]
        with self._lock:
            self._handles = handles
        try:
            for _pid, warm in ray.get([h.ready.remote() for h in handles]):
                self.disk_cache_hits += int(warm)
        except ray.exceptions.RayError as exc:
            raise WorkerError(f"the Ray workers could not start: {exc}") from exc
        return handles, threads

    def _run(self, ray: Any, spec: WorkerSpec, jobs: Sequence[BatchInput], emit: Emit,
             stop: threading.Event) -> None:
        handles, threads = self._start_actors(ray, spec, len(jobs))
        pool = _ActorPool(ray, handles, threads, Dispatch(jobs, emit, self.max_attempts))
        try:
            while not pool.dispatch.idle and not stop.is_set():
                pool.feed()
                pool.collect()
        except BaseException:
            stop.set()  # the actors are killed on the way out, ending their runs
            raise
        finally:
            self.lost_runs += pool.lost_runs
            self._spec_ref = None


class _ActorPool:
    """Hands inputs to actors, `threads` at a time each, and takes results back.

    An actor whose call failed because it died is left alone until it answers
    `ready()` again (it restarts by itself): inputs sent to it meanwhile would
    fail at once and use up their attempts without running.
    """

    def __init__(self, ray: Any, handles: list[Any], threads: int, dispatch: Dispatch) -> None:
        self.ray = ray
        self.handles = handles
        self.threads = threads
        self.dispatch = dispatch
        self.load = [0] * len(handles)
        self.usable = [True] * len(handles)
        self.running: dict[Any, tuple[int, BatchInput, int]] = {}  # ref -> (slot, job, attempt)
        self.probes: dict[Any, tuple[int, int]] = {}  # ready() ref -> (slot, failed probes)
        self.lost_runs = 0
        self.lost_errors = lost_errors(ray)

    def feed(self) -> None:
        for slot, handle in enumerate(self.handles):
            while self.usable[slot] and self.load[slot] < self.threads:
                taken = self.dispatch.take()
                if taken is None:
                    return
                job, attempt = taken
                self.running[handle.run.remote(job, attempt)] = (slot, job, attempt)
                self.load[slot] += 1

    def collect(self) -> None:
        refs = [*self.running, *self.probes]
        if not refs:
            return
        done, _ = self.ray.wait(refs, num_returns=len(refs), timeout=_POLL_S)
        for ref in done:
            if ref in self.probes:
                self._probed(ref, *self.probes.pop(ref))
                continue
            slot, job, attempt = self.running.pop(ref)
            self.load[slot] -= 1
            try:
                self.dispatch.finished(self.ray.get(ref))
            except self.lost_errors as exc:
                self.lost_runs += 1
                self.dispatch.lost(job, attempt, type(exc).__name__)
                self._probe(slot, 0)
            except self.ray.exceptions.RayError as exc:
                self.dispatch.finished(failure_record(job, "host_error", str(exc), attempt))

    def _probe(self, slot: int, failures: int) -> None:
        if self.usable[slot] or failures:
            self.usable[slot] = False
            self.probes[self.handles[slot].ready.remote()] = (slot, failures)

    def _probed(self, ref: Any, slot: int, failures: int) -> None:
        try:
            self.ray.get(ref)
        except self.lost_errors as exc:
            if failures + 1 >= _MAX_FAILED_PROBES:
                raise WorkerError(f"a Ray actor does not come back after dying: {exc}") from exc
            time.sleep(_POLL_S)  # still restarting: ask again shortly
            self._probe(slot, failures + 1)
        else:
            self.usable[slot] = True


# Signals wasmtime turns into wasm traps (SIGILL: `unreachable` and other
# trap instructions; SIGSEGV/SIGBUS: out-of-bounds accesses; SIGFPE: division).
_TRAP_SIGNALS = (signal.SIGILL, signal.SIGSEGV, signal.SIGBUS, signal.SIGFPE)
# Larger than `struct sigaction` on every libc (glibc x86-64: 152 bytes): the
# saved actions are only handed back to sigaction, never read.
_SIGACTION_BYTES = 1024


@contextlib.contextmanager
def crash_handlers_kept() -> Iterator[None]:
    """Keep this process's handlers for the trap signals across `ray.init`.

    Ray's driver installs crash reporters for them that do not chain to the
    handlers before them, so once a Host had run here, the next guest trap
    in this process would kill it instead of ending one run.
    """
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        saved = {sig: ctypes.create_string_buffer(_SIGACTION_BYTES) for sig in _TRAP_SIGNALS}
        for sig, buffer in saved.items():
            libc.sigaction(int(sig), None, buffer)
    except (OSError, AttributeError):
        saved = {}  # no sigaction here (not POSIX): nothing to keep
    try:
        yield
    finally:
        for sig, buffer in saved.items():
            libc.sigaction(int(sig), buffer, None)


def lost_errors(ray: Any) -> tuple[type[BaseException], ...]:
    """The Ray errors that mean "the worker went away", not "the call failed"."""
    names = ("RayActorError", "ActorUnavailableError", "WorkerCrashedError",
             "ObjectLostError", "NodeDiedError", "OwnerDiedError")
    return tuple(getattr(ray.exceptions, n) for n in names if hasattr(ray.exceptions, n))
