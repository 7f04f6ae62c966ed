"""Journal writes made while a guest waits, on one thread per process.

A run about to wait for the world (epoll, a sleep) has its journal's waiting
records written out, so that a crash while it waits loses none of them; but
its wait need not also wait for that write (an SQLite commit under `spearpy
serve`). `soon(flush)` hands the write to a daemon thread shared by every
writer of the process. The writer's lock orders it with the run's own
appends and flushes (the run's next paid call waits for it there), and a
write that fails keeps its records for the run's next flush, which reports
the error.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections import deque
from collections.abc import Callable

Flush = Callable[[], None]


class _Flusher:
    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._queue: deque[Flush] = deque()
        self._thread: threading.Thread | None = None

    def forked(self) -> None:
        """In a forked child, anew: its parent's lock may have been copied
        held (another thread was handing a write over), its thread was not
        copied, and its queued writes are the parent's to make."""
        self._cond, self._queue, self._thread = threading.Condition(), deque(), None

    def soon(self, flush: Flush) -> None:
        with self._cond:
            thread = self._thread
            if thread is None or not thread.is_alive():
                thread = self._thread = threading.Thread(
                    target=self._loop, name="spearpy-journal-flush", daemon=True)
                thread.start()
            self._queue.append(flush)
            self._cond.notify()

    def _loop(self) -> None:
        cond, queue = self._cond, self._queue
        while True:
            with cond:
                while not queue:
                    cond.wait()
                flush = queue.popleft()
            # A failed write keeps its records for the run's next flush, which reports it.
            with contextlib.suppress(Exception):
                flush()


FLUSHER = _Flusher()
os.register_at_fork(after_in_child=FLUSHER.forked)
