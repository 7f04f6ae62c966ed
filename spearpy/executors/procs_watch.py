"""The process executor's watch on workers that are alive but answer
nothing (stopped with SIGSTOP, deadlocked in native code, swapped out), by
watch.py's policy: without it their runs, and their callers, waited for
ever.

One thread per executor looks at every worker once a tick (a second at
most): nothing is done per message but counting it (`_Worker.frames`, by
its reader), and nothing per run but noting its deadline when it is placed.
A worker silent for `silence` while it has runs is sent a ping, which its
main thread answers (its runs are on other threads, so the answer never
waits behind them; it waits only for a GIL that a deadlock holds); one that
has not answered `silence` later is killed. A run still there `grace` after
its deadline ends `timeout`, and its worker is killed: the run ends once
the worker is dead (procs.ProcessRuns._bury), its journal, if it has one,
ended `timeout` first (resumes.end_journal). A killed worker's other runs
end as in a death (`worker_lost`, or resumed from their journals), saying
why it was killed.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Collection
from dataclasses import dataclass
from typing import TYPE_CHECKING

from spearpy.executors.watch import overdue_why, timed_out, unanswered_why

if TYPE_CHECKING:
    from spearpy.executors.procs import _Run, _Worker

_log = logging.getLogger("spearpy.executors")


@dataclass(eq=False)
class Quiet:
    """What the watch last saw of a worker (its thread's alone)."""

    seen: int = 0  # the worker's frame count then
    since: float = 0.0  # when that count last changed, or the worker had no run
    pinged: float | None = None  # when it was pinged, still unanswered


def ends_by(timeout: float | None, grace: float, ahead: Collection[_Run], threads: int,
            now: float) -> float | None:
    """When a run placed now on a worker already holding `ahead` is taken for
    stuck. One placed beyond the worker's threads waits there for a thread
    first: its clock starts when the last of those ahead of it must end
    (never, if one of them has no deadline)."""
    if timeout is None:
        return None
    start = now
    if len(ahead) >= threads:
        deadlines = [run.ends_by for run in ahead]
        if any(d is None for d in deadlines):
            return None
        start = max(now, max(d for d in deadlines if d is not None) - grace)
    return start + timeout + grace


class ProcsWatch:
    """A process executor's watch (above) over its list of `workers`, read
    under its `lock`; a worker not ready `start_timeout` after it was
    started is killed too (a replacement stopped before it said so)."""

    def __init__(self, lock: threading.Lock, workers: list[_Worker], grace: float,
                 silence: float, start_timeout: float) -> None:
        self._lock, self._workers = lock, workers
        self.grace, self.silence = grace, silence
        self._start_timeout = start_timeout
        self._tick = max(0.01, min(1.0, grace / 4, silence / 4))
        self._stop = threading.Event()

    def start(self) -> None:
        threading.Thread(target=self._loop, daemon=True, name="spearpy-procs-watch").start()

    def stop(self) -> None:
        self._stop.set()

    def _loop(self) -> None:
        while not self._stop.wait(self._tick):
            try:
                self._look(time.monotonic())
            except Exception:  # the next look tries again: the watch must not die
                _log.exception("watching the worker processes failed")

    def _look(self, now: float) -> None:
        with self._lock:
            workers = [w for w in self._workers if not w.dead]
        for worker in workers:
            if not worker.ready.is_set():
                if now - worker.born >= self._start_timeout:
                    self.kill(worker, f"it did not start within {self._start_timeout:g} s")
                continue
            if not self._overdue(worker, now):
                self._silent(worker, now)

    def _overdue(self, worker: _Worker, now: float) -> bool:
        """Take the runs past their deadline and grace off their worker, to
        end `timeout` once it is dead (ProcessRuns._bury), and kill it."""
        on = f"its worker process (pid {worker.process.pid})"
        with self._lock:
            late = [key for key, run in worker.runs.items()
                    if run.ends_by is not None and now >= run.ends_by]
            runs = [worker.runs.pop(key) for key in late]
            ends = [(run, timed_out(overdue_why(run.timeout or 0.0, self.grace, on,
                                                "the worker"))) for run in runs]
            worker.overdue.extend(ends)
        if not runs:
            return False
        for run, result in ends:
            _log.error("run %s: %s", run.job.key, result.message)
        timeout = runs[0].timeout or 0.0
        self.kill(worker, f"a run on it exceeded its {timeout:g} s deadline and did not end "
                          f"within {self.grace:g} s more")
        return True

    def _silent(self, worker: _Worker, now: float) -> None:
        """Ping a worker silent for `silence` under runs; kill one that did
        not answer the ping within `silence`."""
        quiet = worker.quiet
        frames = worker.frames
        if frames != quiet.seen or not worker.runs:
            quiet.seen, quiet.since, quiet.pinged = frames, now, None
        elif quiet.pinged is None:
            if now - quiet.since >= self.silence:
                quiet.pinged = now
                worker.outbox.put(("ping",))
        elif now - quiet.pinged >= self.silence:
            self.kill(worker, unanswered_why(self.silence, "it", "it"))

    def kill(self, worker: _Worker, why: str) -> None:
        """Kill a worker taken for hung, or one whose messages cannot be read
        on (ProcessRuns._read_loop); its reader then ends its runs as in a
        death (ProcessRuns._bury), saying `why` (the first reason given)."""
        with self._lock:
            if worker.stopping is not None:
                return
            worker.stopping, worker.dead = why, True  # no new run goes to it
        _log.error("killing worker process %d: %s", worker.process.pid, why)
        with contextlib.suppress(OSError):
            worker.process.kill()
