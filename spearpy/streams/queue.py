"""Where the guest's thread and a client meet: bounded frame queues, and the
signal client-side waiters (threads or asyncio tasks) block on.

The guest side waits on the run's `Waker` (spear_epoll_wait blocks on it);
the client side waits on a `Signal`. Every change to a queue notifies both
after the change is made, and every wait checks its condition after it has
registered, so a wake-up between a check and a wait is never lost. Nothing
polls.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections import deque
from collections.abc import Callable


class FrameQueue:
    """A FIFO of whole frames bounded by frame count and total bytes.

    Thread-safe. A full queue refuses a frame (`offer` returns False) rather
    than growing: that refusal is the backpressure (-EAGAIN to a guest, a
    paused reader to a client)."""

    __slots__ = ("_frames", "_lock", "_on_change", "max_bytes", "max_frames", "nbytes")

    def __init__(self, max_bytes: int, max_frames: int,
                 on_change: Callable[[], None] | None = None) -> None:
        self.max_bytes = max_bytes
        self.max_frames = max_frames
        self.nbytes = 0
        self._frames: deque[bytes] = deque()
        self._lock = threading.Lock()
        self._on_change = on_change

    def __len__(self) -> int:
        return len(self._frames)

    def fits(self, size: int) -> bool:
        """Whether a frame of `size` bytes would be taken now."""
        return len(self._frames) < self.max_frames and self.nbytes + size <= self.max_bytes

    def offer(self, frame: bytes) -> bool:
        with self._lock:
            if not self.fits(len(frame)):
                return False
            self._frames.append(frame)
            self.nbytes += len(frame)
        self._changed()
        return True

    def peek(self) -> bytes | None:
        """The head frame, left in place (its one consumer takes it once used)."""
        with self._lock:
            return self._frames[0] if self._frames else None

    def take(self, max_len: int | None = None) -> tuple[bytes | None, int]:
        """(the head frame, its length), removed; (None, length) when it is
        longer than `max_len` (kept); (None, 0) when empty."""
        with self._lock:
            if not self._frames:
                return None, 0
            size = len(self._frames[0])
            if max_len is not None and size > max_len:
                return None, size
            frame = self._frames.popleft()
            self.nbytes -= size
        self._changed()
        return frame, size

    def clear(self) -> tuple[int, int]:
        """Drop everything: (frames, bytes) dropped."""
        with self._lock:
            dropped = len(self._frames), self.nbytes
            self._frames.clear()
            self.nbytes = 0
        if dropped[0]:
            self._changed()
        return dropped

    def _changed(self) -> None:
        if self._on_change is not None:
            self._on_change()


class Signal:
    """Wakes whoever waits on the client side of a hub: threads (a condition)
    and asyncio tasks (an Event set on their own loop)."""

    __slots__ = ("_async", "_cond")

    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._async: set[tuple[asyncio.AbstractEventLoop, asyncio.Event]] = set()

    def notify(self) -> None:
        with self._cond:
            self._cond.notify_all()
            waiters = tuple(self._async)
        for loop, event in waiters:
            _set_on(loop, event)

    def wait(self, done: Callable[[], bool], timeout: float | None) -> bool:
        """Block until `done()` or `timeout` seconds pass; returns `done()`."""
        end = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while not done():
                if end is None:
                    self._cond.wait()
                    continue
                remaining = end - time.monotonic()
                if remaining <= 0:
                    return done()
                self._cond.wait(remaining)
            return True

    async def wait_async(self, done: Callable[[], bool], timeout: float | None) -> bool:
        loop = asyncio.get_running_loop()
        end = None if timeout is None else loop.time() + timeout
        while True:
            event = asyncio.Event()
            waiter = (loop, event)
            with self._cond:
                self._async.add(waiter)
            try:
                # Checked after registering: a notify from now on sets the event.
                if done():
                    return True
                remaining = None if end is None else end - loop.time()
                if remaining is not None and remaining <= 0:
                    return False
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(event.wait(), remaining)
            finally:
                with self._cond:
                    self._async.discard(waiter)


def _set_on(loop: asyncio.AbstractEventLoop, event: asyncio.Event) -> None:
    try:
        running = asyncio.get_running_loop()
    except RuntimeError:
        running = None
    if running is loop:
        event.set()  # already on that loop's thread: no self-pipe round trip
        return
    with contextlib.suppress(RuntimeError):  # the loop closed: its waiter is gone
        loop.call_soon_threadsafe(event.set)
