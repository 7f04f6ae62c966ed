"""One asyncio event loop in a daemon thread, and a sync bridge into it.

The MCP SDK is async and its sessions are bound to the loop they were opened
on, while the host is sync and threaded. A manager owns one `LoopThread`;
any thread hands it coroutines (`run`, several threads at once) and waits for
the outcome with a deadline and a cancel event. A loop per call would reopen
every session each time.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
import time
from collections.abc import Coroutine
from typing import Any, Generic, TypeVar, cast

from spearpy.errors import SpearpyError

T = TypeVar("T")

# How often a waiting caller looks at its cancel event. A result is returned
# the moment it arrives; only noticing a cancel waits for this tick.
CANCEL_POLL_S = 0.02


class BridgeTimeout(SpearpyError):
    """The caller's deadline passed before the coroutine finished."""


class BridgeCancelled(SpearpyError):
    """The caller's cancel event was set before the coroutine finished."""


class LoopClosed(SpearpyError, RuntimeError):
    """The loop thread was stopped."""


class LoopThread:
    """Started on first use; `stop()` ends it. Thread-safe."""

    def __init__(self, name: str = "spearpy-mcp") -> None:
        self._name = name
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._stopped = False

    @property
    def running(self) -> bool:
        return self._loop is not None and not self._stopped

    def loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._stopped:
                raise LoopClosed("the MCP loop thread was stopped")
            if self._loop is None:
                ready = threading.Event()
                loop = asyncio.new_event_loop()

                def run() -> None:
                    asyncio.set_event_loop(loop)
                    loop.call_soon(ready.set)
                    loop.run_forever()

                thread = threading.Thread(target=run, name=self._name, daemon=True)
                thread.start()
                ready.wait()
                self._loop, self._thread = loop, thread
            return self._loop

    def in_loop_thread(self) -> bool:
        return self._thread is not None and threading.current_thread() is self._thread

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Start `coro` on the loop and return at once: for a coroutine that
        outlives any one caller's wait (bench/m_mcp.py's SDK session owner),
        which `run` cannot hold."""
        try:
            loop = self.loop()
        except LoopClosed:
            coro.close()
            raise
        return asyncio.run_coroutine_threadsafe(coro, loop)

    def run(self, coro: Coroutine[Any, Any, T], *, deadline: float | None = None,
            cancel: threading.Event | None = None) -> T:
        """Run `coro` on the loop and wait for its result.

        `deadline` is a `time.monotonic()` value. When it passes or `cancel` is
        set first, the coroutine is cancelled on the loop (its `finally`
        blocks run there) and BridgeTimeout / BridgeCancelled is raised here
        at once, without waiting for that cleanup."""
        if self.in_loop_thread():
            coro.close()
            raise RuntimeError("LoopThread.run called from its own loop thread (would deadlock)")
        loop = self._loop
        if loop is None or self._stopped:
            try:
                loop = self.loop()
            except LoopClosed:
                coro.close()
                raise
        call: _Call[T] = _Call()
        try:
            loop.call_soon_threadsafe(_start, loop, coro, call)
        except RuntimeError:  # closed between the check and here
            coro.close()
            raise LoopClosed("the MCP loop thread was stopped") from None
        while True:
            wait = -1.0 if cancel is None else CANCEL_POLL_S
            if deadline is not None:
                remaining = max(deadline - time.monotonic(), 0.0)
                wait = remaining if wait < 0 else min(wait, remaining)
            if call.done.acquire(True, wait):
                if call.error is not None:
                    raise call.error
                return cast(T, call.value)
            if cancel is not None and cancel.is_set():
                self._drop(loop, call)
                raise BridgeCancelled()
            if deadline is not None and time.monotonic() >= deadline:
                self._drop(loop, call)
                raise BridgeTimeout()
            if self._stopped:
                raise LoopClosed("the MCP loop thread was stopped during the call")

    @staticmethod
    def _drop(loop: asyncio.AbstractEventLoop, call: _Call[Any]) -> None:
        with contextlib.suppress(RuntimeError):  # a closed loop has nothing left to cancel
            loop.call_soon_threadsafe(call.drop)

    def stop(self, coro: Coroutine[Any, Any, Any] | None = None, timeout: float = 10.0) -> None:
        """Run `coro` (the owner's cleanup) to completion, then stop the loop
        and join the thread. Idempotent."""
        with self._lock:
            if self._stopped:
                if coro is not None:
                    coro.close()
                return
            loop, thread = self._loop, self._thread
            if loop is None:
                self._stopped = True
                if coro is not None:
                    coro.close()
                return
        if self.in_loop_thread():
            # Stopped from its own thread (a finalizer run by the GC there):
            # waiting here would deadlock, so clean up and stop from a task.
            with self._lock:
                self._stopped = True

            async def then_stop() -> None:
                if coro is not None:
                    with contextlib.suppress(Exception):
                        await asyncio.wait_for(coro, timeout)
                loop.stop()

            loop.create_task(then_stop())
            return
        if coro is not None:
            # Cleanup failing or hanging must not keep the loop alive.
            with contextlib.suppress(Exception):
                asyncio.run_coroutine_threadsafe(coro, loop).result(timeout)
        with self._lock:
            self._stopped = True
        loop.call_soon_threadsafe(loop.stop)
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)
        if not loop.is_running():
            loop.close()


class _Call(Generic[T]):
    """One `run`: the coroutine's task and outcome, handed back through a lock
    the caller waits on. A concurrent Future would cost a Condition, a chain
    of callbacks and a second lock per call: the hop is most of what an MCP
    call adds to the SDK's own (docs/mcp.md, "Threads and speed")."""

    __slots__ = ("done", "error", "task", "value")

    def __init__(self) -> None:
        self.done = threading.Lock()
        self.done.acquire()  # released once, on the loop, when the task ends
        self.task: asyncio.Task[T] | None = None
        self.value: T | None = None
        self.error: BaseException | None = None

    def finish(self, task: asyncio.Task[T]) -> None:
        """The task's done callback (loop thread)."""
        if task.cancelled():
            # Cancelled by someone other than our caller (who drops first and
            # has gone): the loop is shutting down.
            self.error = LoopClosed("the MCP loop thread was stopped during the call")
        else:
            self.error = task.exception()
            if self.error is None:
                self.value = task.result()
        self.done.release()

    def drop(self) -> None:
        """The caller gave up (deadline or cancel; loop thread): cancel the task."""
        if self.task is not None:
            self.task.cancel()


def _start(loop: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, T],
           call: _Call[T]) -> None:
    # On the loop, always before the call's `drop`: the caller's thread
    # schedules both, in that order.
    call.task = loop.create_task(coro)
    call.task.add_done_callback(call.finish)
