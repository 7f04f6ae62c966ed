"""A run's waker: the one condition its waits block on.

Anything that can make a guest's wait end notifies it from any thread: an fd
fed from another thread or from asyncio when it becomes ready, the Host's
epoch ticker when the run is cancelled or its deadline passes, a worker when
the upstream request it carries finishes. Waits check their condition under
the waker's lock, and notifiers change state before they call `wake`, so a
wake-up between the check and the wait cannot be lost. No wait polls.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable


class Waker:
    __slots__ = ("_cond",)

    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())

    def wake(self) -> None:
        with self._cond:
            self._cond.notify_all()

    def wait_until(self, done: Callable[[], bool], until: float | None) -> bool:
        """Block until `done()` (checked at each wake-up) or time.monotonic()
        reaches `until` (None: no time limit); returns `done()`."""
        with self._cond:
            while not done():
                if until is None:
                    self._cond.wait()
                    continue
                remaining = until - time.monotonic()
                if remaining <= 0:
                    return done()
                self._cond.wait(remaining)
            return True
