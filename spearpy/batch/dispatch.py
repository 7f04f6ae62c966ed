"""Which inputs are still to run, and what happens to one whose worker died.

Shared by the executors that can lose a worker (processes, Ray): an input
that was running on a worker when it died goes back to the front of the
queue, up to `max_attempts` runs; after that it is reported as
`worker_lost` instead of taking down worker after worker.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable
from typing import Any

from spearpy.batch.jobs import WORKER_LOST, BatchInput, failure_record

# One retry after a crash covers a worker killed from outside (OOM killer,
# node loss); a third death on the same input says the input is the cause.
DEFAULT_MAX_ATTEMPTS = 3

Emit = Callable[[dict[str, Any]], None]


class Dispatch:
    def __init__(self, jobs: Iterable[BatchInput], emit: Emit,
                 max_attempts: int = DEFAULT_MAX_ATTEMPTS) -> None:
        if max_attempts < 1:
            raise ValueError("max_attempts must be at least 1")
        self._pending: deque[tuple[BatchInput, int]] = deque((job, 1) for job in jobs)
        self._emit = emit
        self.max_attempts = max_attempts
        self.running = 0
        self.retried = 0

    @property
    def idle(self) -> bool:
        return not self._pending and self.running == 0

    @property
    def has_pending(self) -> bool:
        return bool(self._pending)

    def take(self) -> tuple[BatchInput, int] | None:
        if not self._pending:
            return None
        self.running += 1
        return self._pending.popleft()

    def finished(self, record: dict[str, Any]) -> None:
        self.running -= 1
        self._emit(record)

    def lost(self, job: BatchInput, attempt: int, why: str) -> None:
        """The worker running `job` died before answering."""
        self.running -= 1
        if attempt >= self.max_attempts:
            self._emit(failure_record(
                job, WORKER_LOST, f"the worker died on each of {attempt} attempts to run this "
                f"input (last: {why})", attempt))
        else:
            self.retried += 1
            self._pending.appendleft((job, attempt + 1))
