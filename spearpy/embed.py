"""Runs in the background: a handle to wait for one run or cancel it from any thread.

`Host.run` blocks its thread until the guest ends. Embedders (web backends,
job workers, asyncio services) need to start a run, keep serving, and stop it
early when the client goes away. A `RunHandle` owns one thread running one
guest; `cancel()` sets the run's cancel event, which the run notices at the
next epoch tick (guest code), at once in `sleep_ms`/epoll waits, and between
upstream requests.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from spearpy.host import Host, LoadedModule
    from spearpy.outcome import RunResult
    from spearpy.streams import StreamClient, StreamHub, UserStream



class RunHandle:
    """One guest run on its own thread (from `Host.start`)."""

    def __init__(self, host: Host, module: str | os.PathLike[str] | bytes | LoadedModule,
                 argv: list[str] | tuple[str, ...] = (), **kwargs: Any) -> None:
        given = kwargs.pop("cancel", None)
        self._cancel: threading.Event = given if given is not None else threading.Event()
        # streams=True: a hub of its own, so open_stream works before the run starts.
        streams = kwargs.pop("streams", None)
        if streams is True:
            from spearpy.streams import StreamHub

            streams = StreamHub()
        self.streams: StreamHub | None = streams or None
        if self.streams is not None:
            kwargs["streams"] = self.streams
        self._stream_client: StreamClient | None = None
        self._future: Future[RunResult] = Future()
        self._host = host
        self._module = module
        self._argv = list(argv)
        self._kwargs = kwargs
        # A daemon thread: a guest that ignores nothing but cancel must not keep
        # the embedding process alive at exit; embedders cancel and wait first.
        self._thread = threading.Thread(target=self._main, name="spearpy-run", daemon=True)

    def _start(self) -> RunHandle:
        self._thread.start()
        return self

    def _main(self) -> None:
        if not self._future.set_running_or_notify_cancel():
            return
        try:
            result = self._host.run(self._module, self._argv, cancel=self._cancel,
                                    **self._kwargs)
        except BaseException as exc:
            self._future.set_exception(exc)
        else:
            self._future.set_result(result)
        finally:
            if self.streams is not None:
                self.streams.unbind()  # also when the run never started: clients see the end

    def open_stream(self, stream_id: int) -> UserStream:
        """The client's end of user stream `stream_id` (start with streams=True):
        `send(bytes, meta=None)`, `recv(timeout)`, `asend`, `arecv`, `close()`.
        The first call attaches this handle's client session to the run."""
        if self.streams is None:
            raise RuntimeError("this run has no user streams: start it with streams=True")
        if self._stream_client is None:
            from spearpy.streams import StreamClient

            self._stream_client = StreamClient(self.streams)
        return self._stream_client.open_stream(stream_id)

    def close_streams(self, reason: str = "client closed") -> None:
        """End this handle's stream session: the guest gets SESSION_CLOSED."""
        if self._stream_client is not None:
            self._stream_client.close(reason)

    def cancel(self) -> None:
        """Ask the run to stop; it ends with outcome "cancelled" (exit code 130)
        unless it finished first. Safe to call from any thread, any number of times."""
        self._cancel.set()

    @property
    def cancel_requested(self) -> bool:
        return self._cancel.is_set()

    def done(self) -> bool:
        return self._future.done()

    def result(self, timeout: float | None = None) -> RunResult:
        """Wait for the RunResult. Raises TimeoutError if `timeout` passes first
        (the run keeps going), or the exception `Host.run` raised (e.g.
        ModuleLoadError)."""
        return self._future.result(timeout)

    def add_done_callback(self, fn: Callable[[RunHandle], None]) -> None:
        """Call `fn(handle)` when the run ends (on the run's thread, or at once if done)."""
        self._future.add_done_callback(lambda _f: fn(self))

    def future(self) -> Future[RunResult]:
        """The underlying concurrent.futures.Future (for `asyncio.wrap_future`, `wait`)."""
        return self._future

    async def wait(self) -> RunResult:
        """Await the result without blocking the event loop; cancelling the
        awaiting task cancels the guest and waits for it to end."""
        import asyncio  # only embedders that await pay for it, not `spearpy run`

        waiter = asyncio.wrap_future(self._future)
        try:
            return await asyncio.shield(waiter)
        except asyncio.CancelledError:
            self.cancel()
            # Let the guest wind down (it notices within an epoch tick) so the
            # caller's cancellation never leaves a run going behind its back.
            await asyncio.wait([waiter])
            raise


def start_run(host: Host, module: str | os.PathLike[str] | bytes | LoadedModule,
              argv: list[str] | tuple[str, ...] = (), **kwargs: Any) -> RunHandle:
    return RunHandle(host, module, argv, **kwargs)._start()
