"""The Ray executor (`spearpy serve --ray ADDRESS`): each run is a call on a
Ray actor holding warm Hosts (serve/worker.py's WorkerRuns, as a worker
process has), several runs at once on its threads.

The call is a streaming generator: the actor yields the run's events as they
happen and its end last, so a client of the service sees them live. A thread
of the service follows each run's stream. An actor that dies (its process or
its node) ends its runs as `worker_lost` and is restarted by Ray. Ray is
imported only when this executor is used: `pip install spearpy[ray]`.
"""

from __future__ import annotations

import logging
import os
import queue
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from spearpy.batch.jobs import BatchError
from spearpy.batch.ray_exec import crash_handlers_kept, import_ray, lost_errors
from spearpy.observe.events import EventSink
from spearpy.serve.executors import OnEnd, RunJob, worker_lost

if TYPE_CHECKING:
    from spearpy.config import HostConfig
    from spearpy.host import Host, LoadedModule

_log = logging.getLogger("spearpy.serve")


class ServeActor:
    """The body of a Ray actor: a worker's Hosts, running the service's runs."""

    def __init__(self, config: dict[str, Any]) -> None:
        from spearpy.serve.worker import WorkerRuns

        self._runs = WorkerRuns(config)

    def ready(self) -> int:
        return os.getpid()

    def run(self, job: RunJob, wasm: bytes) -> Iterator[tuple[Any, ...]]:
        """("event", key, Event)... then ("end", key, RunResult | None, error | None)."""
        messages: queue.SimpleQueue[tuple[Any, ...]] = queue.SimpleQueue()
        worker = threading.Thread(target=self._runs.run, args=(job, wasm, messages.put),
                                  name=f"spearpy-serve-run-{job.key}", daemon=True)
        worker.start()
        while True:
            message = messages.get()
            yield message
            if message[0] == "end":
                return

    def cancel(self, key: str) -> None:
        self._runs.cancel(key)


class RayRuns:
    name = "ray"
    streams = False  # a user stream's hub would live on the cluster

    def __init__(self, address: str, config: HostConfig, max_concurrent: int,
                 actors: int | None = None) -> None:
        self.address = address
        self._config = config.model_dump()
        self._max_concurrent = max_concurrent
        self._actors = actors
        self._ray: Any = None
        self._started_ray = False
        self._handles: list[Any] = []
        self._load: list[int] = []
        self._where: dict[str, int] = {}  # run key -> actor slot
        self._wasm_refs: dict[str, Any] = {}  # sha256 -> the module in the object store
        self._lock = threading.Lock()

    def place(self, module: LoadedModule) -> RayRuns:
        return self

    def start(self) -> None:
        ray = self._ray = import_ray()
        if not ray.is_initialized():
            address = None if self.address == "local" else self.address
            try:
                # Ray's crash reporters would replace the handlers that turn
                # guest faults into traps (batch/ray_exec.py).
                with crash_handlers_kept():
                    ray.init(address=address, include_dashboard=False, log_to_driver=False)
            except (ConnectionError, RuntimeError, ValueError) as exc:
                raise BatchError(f"cannot connect to the Ray cluster {self.address!r}: "
                                 f"{exc}") from exc
            self._started_ray = True
        cpus = int(ray.cluster_resources().get("CPU", 1)) or 1
        count = max(1, min(self._actors or cpus, self._max_concurrent))
        threads = -(-self._max_concurrent // count)
        # One slot more than runs, so cancel() never queues behind busy runs.
        actor_class = ray.remote(num_cpus=1, max_restarts=-1, max_task_retries=0,
                                 max_concurrency=threads + 1)(ServeActor)
        self._handles = [actor_class.remote(self._config) for _ in range(count)]
        self._load = [0] * count
        try:
            ray.get([h.ready.remote() for h in self._handles], timeout=300)
        except ray.exceptions.RayError as exc:
            raise RuntimeError(f"the Ray actors of the service could not start: {exc}") from exc

    def submit(self, job: RunJob, wasm: bytes, host: Host, module: LoadedModule,
               cancel: threading.Event, on_event: EventSink, on_end: OnEnd) -> None:
        ray = self._ray
        with self._lock:
            slot = min(range(len(self._handles)), key=self._load.__getitem__)
            self._load[slot] += 1
            self._where[job.key] = slot
            ref = self._wasm_refs.get(job.sha256)
            if ref is None:
                ref = self._wasm_refs[job.sha256] = ray.put(wasm)
        stream = self._handles[slot].run.remote(job, ref)
        if cancel.is_set():
            self.cancel(job.key)
        threading.Thread(target=self._follow, args=(job.key, stream, on_event, on_end),
                         name=f"spearpy-serve-ray-{job.key}", daemon=True).start()

    def _follow(self, key: str, stream: Any, on_event: EventSink, on_end: OnEnd) -> None:
        ray = self._ray
        ended = False
        try:
            for ref in stream:
                message = ray.get(ref)
                if message[0] == "event":
                    on_event(message[2])
                elif message[0] == "end":
                    ended = True
                    error = RuntimeError(message[3]) if message[3] is not None else None
                    on_end(message[2], error)
        except lost_errors(ray) as exc:
            if not ended:
                ended = True
                on_end(worker_lost(f"the Ray actor running this run died before the run "
                                   f"ended ({type(exc).__name__})"), None)
        except ray.exceptions.RayError as exc:
            if not ended:
                ended = True
                on_end(None, RuntimeError(f"Ray: {exc}"))
        finally:
            if not ended:
                on_end(worker_lost("the Ray actor's stream ended without the run's end"), None)
            with self._lock:
                slot = self._where.pop(key, None)
                if slot is not None:
                    self._load[slot] -= 1

    def cancel(self, key: str) -> None:
        with self._lock:
            slot = self._where.get(key)
        if slot is not None:
            self._handles[slot].cancel.remote(key)

    def close(self) -> None:
        ray = self._ray
        if ray is None:
            return
        handles, self._handles = self._handles, []
        for handle in handles:
            try:
                ray.kill(handle, no_restart=True)
            except Exception:  # already gone
                _log.debug("serve: killing a Ray actor failed", exc_info=True)
        self._wasm_refs.clear()
        if self._started_ray:
            with crash_handlers_kept():  # shutdown resets them too
                ray.shutdown()
        self._ray = None
