"""One upstream completion that a cancel from another thread can cut short.

httpx's synchronous client cannot be interrupted while it waits for an
answer, so a run that may be cancelled waits for the request on a worker
thread, blocked on the run's waker, which the worker wakes when the request
ends and the Host's ticker wakes when the run is cancelled. The abandoned
request ends on its own (request timeout, run deadline, or the Host closing
its client) and the backend starts no further attempt, because the request
carries the same cancel event.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from spearpy.backends.base import Backend, CompletionRequest
    from spearpy.chat.protocol import CompletionResult
    from spearpy.fds import Waker


class _Outcome:
    __slots__ = ("done", "error", "result")

    def __init__(self) -> None:
        self.done = threading.Event()
        self.result: CompletionResult | None = None
        self.error: BaseException | None = None


def complete(backend: Backend, request: CompletionRequest,
             waker: Waker | None) -> CompletionResult | None:
    """The backend's result, or None when the run was cancelled first.

    Runs that nobody can cancel (no waker) call the backend directly: a
    thread per request is only worth paying for when a cancel can arrive.
    """
    cancel = request.cancel
    if waker is None or cancel is None:
        return backend.complete(request)
    if cancel.is_set():
        return None
    outcome = _Outcome()

    def work() -> None:
        try:
            outcome.result = backend.complete(request)
        except BaseException as exc:  # handed to the waiting thread, which reports it
            outcome.error = exc
        finally:
            outcome.done.set()
            waker.wake()

    threading.Thread(target=work, name="spearpy-upstream", daemon=True).start()
    waker.wait_until(lambda: outcome.done.is_set() or cancel.is_set(), None)
    if not outcome.done.is_set():
        return None
    if outcome.error is not None:
        raise outcome.error
    return outcome.result
