"""Journal writes made while a guest waits, on one thread per process.

A run about to wait for the world (epoll, a sleep) has its journal's waiting
records written out, so that a crash while it waits loses none of them; but
its wait need not also wait for that write (an SQLite commit under `spearpy
serve`). `soon(flush)` hands the write to a daemon thread shared by every
writer of the process. The writer's lock orders it with the run's own
appends and flushes (the run's next paid call waits for it there), and a
write that fails keeps its records for the run's next flush, which reports
the error. `later(delay, flush)` runs one there after `delay` seconds: a
writer's bound on how long an answer waits unwritten while its guest
computes on without a call.
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import os
import threading
import time
from collections import deque
from collections.abc import Callable

Flush = Callable[[], None]


class _Flusher:
    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._queue: deque[Flush] = deque()
        self._timers: list[tuple[float, int, Flush]] = []  # a heap: (due, order, flush)
        self._order = itertools.count()
        self._thread: threading.Thread | None = None

    def forked(self) -> None:
        """In a forked child, anew: its parent's lock may have been copied
        held (another thread was handing a write over), its thread was not
        copied, and its queued writes are the parent's to make."""
        self._cond, self._queue, self._timers, self._thread = \
            threading.Condition(), deque(), [], None

    def soon(self, flush: Flush) -> None:
        """`flush` on the flusher thread; at once on this one when no thread
        can start (the process's limit), as before there was a flusher."""
        with self._cond:
            running = self._running()
            if running:
                self._queue.append(flush)
                self._cond.notify()
        if not running:
            with contextlib.suppress(Exception):  # kept for the run's next flush, as there
                flush()

    def later(self, delay: float, flush: Flush) -> bool:
        """`flush` on the flusher thread after `delay` seconds; False (none
        armed) when no thread can start."""
        with self._cond:
            if not self._running():
                return False
            heapq.heappush(self._timers, (time.monotonic() + delay, next(self._order), flush))
            self._cond.notify()
            return True

    def _running(self) -> bool:
        if self._thread is not None and self._thread.is_alive():
            return True
        thread = threading.Thread(target=self._loop, name="spearpy-journal-flush", daemon=True)
        try:
            thread.start()
        except RuntimeError:  # can't start new thread
            return False
        self._thread = thread
        return True

    def _loop(self) -> None:
        cond, queue, timers = self._cond, self._queue, self._timers
        while True:
            with cond:
                while True:
                    if queue:
                        flush = queue.popleft()
                        break
                    wait = timers[0][0] - time.monotonic() if timers else None
                    if wait is not None and wait <= 0:
                        flush = heapq.heappop(timers)[2]
                        break
                    cond.wait(wait)
            # A failed write keeps its records for the run's next flush, which reports it.
            with contextlib.suppress(Exception):
                flush()


FLUSHER = _Flusher()
os.register_at_fork(after_in_child=FLUSHER.forked)
