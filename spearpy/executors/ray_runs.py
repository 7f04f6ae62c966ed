"""Runs on a Ray cluster (the optional `[ray]` extra): each run is a call on
a Ray actor holding warm Hosts (worker.py's WorkerRuns, as a worker process
has), several runs at once on its threads.

The call is a streaming generator: the actor yields the run's messages as
they happen and its end last, and a thread here follows each run's stream.
An actor that dies (its process or its node) is restarted by Ray; it gets
new runs only once it answers again (runs sent to it meanwhile would fail
at once without running), and runs wait while no actor can take them. Its
runs end as `worker_lost`, but a run with a journal (RunJob.journal), which
resumes on another actor from its journal instead, as on worker processes
(procs.py): at most `max_resumes` times, its `on_event` told first
(RUN_RESUMED); no completion the journal holds is asked again. An actor
alive to Ray that answers nothing (stopped, deadlocked, cut off) is killed
once a run on it outlives its deadline and a grace, or stays silent and the
actor does not answer a ping (ray_watch.py): nothing waits for it for ever.
Ray is imported only when this executor starts: `pip install spearpy[ray]`.
"""

from __future__ import annotations

import logging
import os
import queue
import threading
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from spearpy.executors.base import ExecutorError, OnEnd, RunJob, worker_lost
from spearpy.executors.ray_signals import crash_handlers_kept
from spearpy.executors.ray_watch import WATCH_GROUP, Hung, Watch
from spearpy.executors.resumes import end_journal, resumed_event, resumed_job
from spearpy.executors.watch import GRACE_S, SILENCE_S, check_bound, run_timeout, timed_out

if TYPE_CHECKING:
    from spearpy.config import HostConfig
    from spearpy.host import Host, LoadedModule
    from spearpy.observe.events import EventSink

_POLL_S = 0.1
# An actor that does not answer for this long after dying is taken for gone
# for good: its node is lost and nothing can host it.
_COME_BACK_S = 30.0
_READY_TIMEOUT_S = 300.0
# A journaled run whose actor died resumes on another this many times (as
# procs.MAX_RESUMES); a run that keeps killing its actors then ends worker_lost.
MAX_RESUMES = 2
_log = logging.getLogger("spearpy.executors")


def import_ray() -> Any:
    try:
        import ray
    except ImportError as exc:
        raise ExecutorError("Ray is not installed: pip install 'spearpy[ray]'") from exc
    return ray


def _answered_pids(ray: Any, refs: list[Any], wait: float) -> list[int]:
    """The pids the actors' `ready` calls gave within `wait` seconds, in
    their order."""
    if not refs:
        return []
    done, late = ray.wait(refs, num_returns=len(refs), timeout=wait)
    if late:
        _log.warning("%d Ray actor(s) did not say their pid within %.1f s: left out",
                     len(late), wait)
    answered = set(done)
    pids = []
    for ref in refs:
        if ref not in answered:
            continue
        try:
            pids.append(int(ray.get(ref, timeout=0)))
        except lost_errors(ray):
            continue  # died just now: no pid to give
    return pids


def lost_errors(ray: Any) -> tuple[type[BaseException], ...]:
    """The Ray errors that mean "the worker went away", not "the call failed"."""
    names = ("RayActorError", "ActorUnavailableError", "WorkerCrashedError",
             "ObjectLostError", "NodeDiedError", "OwnerDiedError")
    return tuple(getattr(ray.exceptions, n) for n in names if hasattr(ray.exceptions, n))


class RayActor:
    """The body of a Ray actor: a worker's Hosts, running runs."""

    def __init__(self, config: dict[str, Any]) -> None:
        from spearpy.executors.worker import WorkerRuns

        self._runs = WorkerRuns(config)

    def ready(self) -> int:
        return os.getpid()

    def run(self, job: RunJob, wasm: bytes, stream: bool) -> Iterator[tuple[Any, ...]]:
        """The run's messages (worker.py), its end last."""
        messages: queue.SimpleQueue[tuple[Any, ...]] = queue.SimpleQueue()
        worker = threading.Thread(target=self._runs.run,
                                  args=(job, wasm, stream, messages.put),
                                  name=f"spearpy-ray-run-{job.key}", daemon=True)
        worker.start()
        while True:
            message = messages.get()
            yield message
            if message[0] == "end":
                return

    def cancel(self, key: str) -> None:
        self._runs.cancel(key)


@dataclass(eq=False)
class _Submitted:
    job: RunJob
    wasm: bytes
    cancel: threading.Event
    on_event: EventSink | None
    on_end: OnEnd
    resumes: int = 0


class RayRuns:
    """`address`: a cluster address ("ray://host:10001", "host:6379"),
    "auto" (the cluster this machine is part of) or "local" (start a
    private single-machine cluster). `grace` and `silence`: how long a run
    may go on past its deadline, and stay silent, before its actor is taken
    for hung (ray_watch.py)."""

    name = "ray"

    def __init__(self, address: str, config: HostConfig, max_concurrent: int,
                 actors: int | None = None, max_resumes: int = MAX_RESUMES, *,
                 grace: float = GRACE_S, silence: float = SILENCE_S) -> None:
        if max_concurrent < 1:
            raise ValueError("max_concurrent must be at least 1")
        if max_resumes < 0:
            raise ValueError("max_resumes must not be negative")
        check_bound("grace", grace)
        check_bound("silence", silence)
        self.max_resumes = max_resumes
        self.grace, self.silence = grace, silence
        self.address = address
        self._config = config.model_dump()
        self._max_concurrent = max_concurrent
        self._actors = actors
        self._ray: Any = None
        self._started_ray = False
        self._handles: list[Any] = []
        self._load: list[int] = []
        self._usable: list[bool] = []
        self._where: dict[str, int] = {}  # run key -> actor slot
        self._waiting: deque[_Submitted] = deque()  # while no actor is usable
        self._wasm_refs: dict[str, Any] = {}  # sha256 -> the module in the object store
        self._lock = threading.Lock()
        self._closing = False
        self.workers_lost = 0  # actors that died under a run
        self.failure: ExecutorError | None = None

    def worker_pids(self, busy: bool = False, *, wait: float = _COME_BACK_S) -> list[int]:
        """The actors' pids (`busy`: only those running a run), for
        monitoring and for tests that kill them. An actor that does not
        answer within `wait` seconds, all of them together (a stopped or
        hung process, one still restarting), is left out and logged: by
        default the time after which _await_actor takes an actor for gone."""
        with self._lock:
            running = set(self._where.values())
            handles = [h for slot, h in enumerate(self._handles)
                       if self._usable[slot] and (slot in running or not busy)]
        return _answered_pids(self._ray, [h.ready.remote() for h in handles], wait)

    def start(self) -> None:
        ray = self._ray = import_ray()
        if not ray.is_initialized():
            address = None if self.address == "local" else self.address
            try:
                # Ray's crash reporters would replace the handlers that turn
                # guest faults into traps (ray_signals.py).
                with crash_handlers_kept():
                    ray.init(address=address, include_dashboard=False, log_to_driver=False)
            except (ConnectionError, RuntimeError, ValueError) as exc:
                raise ExecutorError(f"cannot connect to the Ray cluster {self.address!r}: "
                                    f"{exc}") from exc
            self._started_ray = True
        cpus = int(ray.cluster_resources().get("CPU", 1)) or 1
        count = max(1, min(self._actors or cpus, self._max_concurrent))
        threads = -(-self._max_concurrent // count)
        # One slot more than runs, so cancel() and ready() never queue behind busy runs.
        actor_class = ray.remote(num_cpus=1, max_restarts=-1, max_task_retries=0,
                                 max_concurrency=threads + 1,
                                 concurrency_groups={WATCH_GROUP: 1})(RayActor)
        handles = [actor_class.remote(self._config) for _ in range(count)]
        with self._lock:
            self._handles, self._load, self._usable = handles, [0] * count, [True] * count
        try:
            ray.get([h.ready.remote() for h in handles], timeout=_READY_TIMEOUT_S)
        except ray.exceptions.RayError as exc:
            raise ExecutorError(f"the Ray actors could not start: {exc}") from exc

    def submit(self, job: RunJob, wasm: bytes, host: Host | None, module: LoadedModule | None,
               cancel: threading.Event, on_event: EventSink | None, on_end: OnEnd) -> None:
        self._place(_Submitted(job, wasm, cancel, on_event, on_end))

    def cancel(self, key: str) -> None:
        with self._lock:
            slot = self._where.get(key)
        if slot is not None:
            self._handles[slot].cancel.remote(key)

    def close(self) -> None:
        ray = self._ray
        if ray is None:
            return
        with self._lock:
            self._closing = True
            handles, self._handles = self._handles, []
            waiting, self._waiting = list(self._waiting), deque()
        for run in waiting:
            run.on_end(worker_lost("the executor closed before a Ray actor took the run"), None)
        for handle in handles:
            try:
                ray.kill(handle, no_restart=True)
            except Exception:  # already gone
                _log.debug("killing a Ray actor failed", exc_info=True)
        self._wasm_refs.clear()
        if self._started_ray:
            with crash_handlers_kept():  # shutdown resets them too
                ray.shutdown()
        self._ray = None

    # ---- internals ---------------------------------------------------------

    def _place(self, run: _Submitted) -> None:
        with self._lock:
            slot = self._slot_for(run)
        if slot is not None:
            self._launch(slot, run)
        else:
            self._unplaced(run)

    def _unplaced(self, run: _Submitted) -> None:
        """A run no actor took: it waits (see _slot_for), unless nothing
        will take it any more."""
        if self.failure is not None or self._closing:
            why = self.failure or "the executor closed"
            run.on_end(worker_lost(f"no Ray actor can take runs: {why}"), None)

    def _slot_for(self, run: _Submitted) -> int | None:
        """The least busy usable actor, the run then counted on it; None
        (under the lock) when none is usable: the run waits, unless the
        executor failed or is closing."""
        if self._closing:
            return None
        usable = [s for s in range(len(self._handles)) if self._usable[s]]
        if not usable:
            if self.failure is None:
                self._waiting.append(run)
            return None
        slot = min(usable, key=self._load.__getitem__)
        self._load[slot] += 1
        self._where[run.job.key] = slot
        return slot

    def _launch(self, slot: int, run: _Submitted) -> None:
        ray = self._ray
        with self._lock:
            ref = self._wasm_refs.get(run.job.sha256)
            if ref is None:
                ref = self._wasm_refs[run.job.sha256] = ray.put(run.wasm)
            handle = self._handles[slot]
        stream = handle.run.remote(run.job, ref, run.on_event is not None)
        if run.cancel.is_set():
            self.cancel(run.job.key)
        threading.Thread(target=self._follow, args=(slot, run, stream), daemon=True,
                         name=f"spearpy-ray-{run.job.key}").start()

    def _follow(self, slot: int, run: _Submitted, stream: Any) -> None:
        ray = self._ray
        ended = False
        lost: str | None = None  # why its actor is gone, when it died under the run
        watch = Watch(run_timeout(run.job.limits, self._config), self.grace, self.silence)
        try:
            for message in watch.messages(ray, stream, lambda wait: self._answers(slot, wait)):
                if message[0] == "event" and run.on_event is not None:
                    run.on_event(message[2])
                elif message[0] == "end":
                    ended = True
                    error = RuntimeError(message[3]) if message[3] is not None else None
                    run.on_end(message[2], error)
        except lost_errors(ray) as exc:
            if not ended:
                ended = True
                self._probe(slot)
                lost = (f"the Ray actor running this run died before the run ended "
                        f"({type(exc).__name__})")
        except Hung as hung:
            if not ended:
                ended = True
                _log.error("run %s: %s", run.job.key, hung.why)
                self._probe(slot, kill=True)
                if hung.timed_out:
                    result = timed_out(hung.why)
                    try:
                        end_journal(run.job, result, wait=_COME_BACK_S)  # as procs.py does
                    finally:
                        run.on_end(result, None)  # told whatever came of its journal
                else:
                    lost = hung.why
        except ray.exceptions.RayError as exc:
            if not ended:
                ended = True
                run.on_end(None, RuntimeError(f"Ray: {exc}"))
        finally:
            if not ended:
                run.on_end(worker_lost("the Ray actor's stream ended without the run's end"),
                           None)
            with self._lock:
                if self._where.pop(run.job.key, None) is not None:
                    self._load[slot] -= 1
            # After its slot is given back: a resumed run takes another.
            if lost is not None:
                self._lost(run, lost)

    def _lost(self, run: _Submitted, why: str) -> None:
        """A run whose actor died: resumed from its journal on another actor
        (the dead actor's writer lock on it went with its process), or ended."""
        with self._lock:
            going = not self._closing and self.failure is None
        job: RunJob | str | None = None
        if going and run.job.journal is not None and not run.cancel.is_set() \
                and run.resumes < self.max_resumes:
            job = resumed_job(run.job)  # a fork goes on with its own journal
        if not isinstance(job, RunJob):
            resumed = f" (resumed {run.resumes} times before)" if run.resumes else ""
            run.on_end(worker_lost(why + resumed + (f"; {job}" if job else "")), None)
            return
        run.job = job
        run.resumes += 1
        _log.warning("%s; resuming run %s from its journal (%d of at most %d)", why,
                     run.job.key, run.resumes, self.max_resumes)
        if run.on_event is not None:
            run.on_event(resumed_event(why, run.resumes))
        self._place(run)

    def _answers(self, slot: int, wait: float) -> bool:
        """Whether the actor in `slot` answers within `wait` seconds (any
        answer, a death too: a dead actor's streams say so themselves)."""
        with self._lock:
            handle = self._handles[slot] if slot < len(self._handles) else None
        if handle is None:
            return True  # closed: the killed actors' streams end the runs
        ready, _ = self._ray.wait(
            [handle.ready.options(concurrency_group=WATCH_GROUP).remote()], timeout=wait)
        return bool(ready)

    def _probe(self, slot: int, *, kill: bool = False) -> None:
        """Take the actor out of use until it answers again (on a thread);
        `kill`: it is hung, so kill it first (Ray restarts it)."""
        with self._lock:
            if not self._usable[slot]:
                return  # a probe is on it already: the same death, or killed already
            self._usable[slot] = False
            self.workers_lost += 1
            handle = self._handles[slot] if kill else None
        if handle is not None:
            try:
                self._ray.kill(handle, no_restart=False)
            except Exception:  # gone already, or closed meanwhile
                _log.debug("killing a hung Ray actor failed", exc_info=True)
        threading.Thread(target=self._await_actor, args=(slot,), daemon=True,
                         name=f"spearpy-ray-probe-{slot}").start()

    def _await_actor(self, slot: int) -> None:
        ray = self._ray
        deadline = time.monotonic() + _COME_BACK_S
        back = False
        while not back and time.monotonic() < deadline and ray is self._ray:
            try:
                ray.get(self._handles[slot].ready.remote(),
                        timeout=max(_POLL_S, deadline - time.monotonic()))
                back = True
            except lost_errors(ray):
                time.sleep(_POLL_S)  # still restarting: ask again shortly
            except (ray.exceptions.RayError, IndexError):
                break  # timed out, or closed meanwhile
        with self._lock:
            self._usable[slot] = back
            if not back and not any(self._usable):
                self.failure = ExecutorError("the Ray actors do not come back after dying")
            waiting, self._waiting = self._waiting, deque()
            placed = [(self._slot_for(run), run) for run in waiting]
        for target, run in placed:
            if target is not None:
                self._launch(target, run)
            else:
                self._unplaced(run)
