"""Where the guest's thread and a client meet: bounded frame queues, and the
signal client-side waiters (threads or asyncio tasks) block on.

The guest side waits on the run's `Waker` (spear_epoll_wait blocks on it);
the client side waits on a `Signal`. A queue tells the side that may be
waiting for the change, after the change is made: a frame put in wakes its
consumer, a frame taken out its producer (only when it may be waiting: a
thread woken for nothing costs a GIL hand-off on every frame). Every wait
checks its condition after it has registered, so a wake-up between a check
and a wait is never lost. Nothing polls.
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

    __slots__ = ("_frames", "_lock", "_on_put", "_on_take", "max_bytes", "max_frames",
                 "nbytes")

    def __init__(self, max_bytes: int, max_frames: int,
                 on_put: Callable[[], None] | None = None,
                 on_take: Callable[[], None] | None = None) -> None:
        self.max_bytes = max_bytes
        self.max_frames = max_frames
        self.nbytes = 0
        self._frames: deque[bytes] = deque()
        self._lock = threading.Lock()
        self._on_put = on_put  # the consumer may be waiting for a frame
        self._on_take = on_take  # the producer may be waiting for room

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
        if self._on_put is not None:
            self._on_put()
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
        if self._on_take is not None:
            self._on_take()
        return frame, size

    def clear(self) -> tuple[int, int]:
        """Drop everything: (frames, bytes) dropped."""
        with self._lock:
            dropped = len(self._frames), self.nbytes
            self._frames.clear()
            self.nbytes = 0
        if dropped[0] and self._on_take is not None:
            self._on_take()
        return dropped


class Signal:
    """Wakes whoever waits on the client side of a hub: threads (a condition)
    and asyncio tasks (a future resolved on their own loop)."""

    __slots__ = ("_async", "_cond")

    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._async: set[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = set()

    def notify(self) -> None:
        with self._cond:
            self._cond.notify_all()
            waiters = tuple(self._async)
        if waiters:
            running = asyncio._get_running_loop()
            for loop, future in waiters:
                if loop is running:
                    _resolve(future)  # already on that loop's thread: no self-pipe round trip
                    continue
                with contextlib.suppress(RuntimeError):  # the loop closed: its waiter is gone
                    loop.call_soon_threadsafe(_resolve, future)

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
        if done():
            return True
        loop = asyncio.get_running_loop()
        end = None if timeout is None else loop.time() + timeout
        while True:
            future: asyncio.Future[None] = loop.create_future()
            waiter = (loop, future)
            with self._cond:
                self._async.add(waiter)
            try:
                # Checked after registering: a notify from now on resolves the future.
                if done():
                    return True
                if end is None:
                    await future
                    continue
                remaining = end - loop.time()
                if remaining <= 0:
                    return False
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(future, remaining)
            finally:
                with self._cond:
                    self._async.discard(waiter)


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)
