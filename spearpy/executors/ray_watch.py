"""How long the Ray executor waits for a run's next message, and what it
concludes when none comes (ray_runs.RayRuns._follow).

Ray reports an actor whose process or node died, but not one that is alive
and answers nothing: a process stopped (SIGSTOP) or deadlocked, a node cut
off before Ray noticed. Waiting for such an actor's next message would hang
the caller for ever, so every wait is bounded twice over, by the policy
watch.py states: the run's deadline plus `grace` (its actor is killed, Ray
restarts it, and the run ends `timeout`), and `silence`, after which a run
that sent nothing has its actor pinged on a concurrency group of its own,
so the ping never queues behind runs (an actor that does not answer within
`silence` more is killed, and its runs are lost as in a death).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

from spearpy.errors import SpearpyError
from spearpy.executors.watch import overdue_why, unanswered_why

# The actor's concurrency group for that question: one thread of its own.
WATCH_GROUP = "watch"

# (wait) -> whether the run's actor answered within `wait` seconds
Answers = Callable[[float], bool]


class Hung(SpearpyError):
    """Nothing came from a run's actor within its bounds. `timed_out`: the
    run outlived its deadline and grace (else the actor stopped answering)."""

    def __init__(self, timed_out: bool, why: str) -> None:
        super().__init__(why)
        self.timed_out = timed_out
        self.why = why


class Watch:
    """One run's bounds, from the moment it was sent to its actor."""

    def __init__(self, timeout: float | None, grace: float, silence: float) -> None:
        self.timeout = timeout
        self.grace = grace
        self.silence = silence
        self.ends_by = time.monotonic() + timeout + grace if timeout is not None else None

    def _left(self) -> float:
        return self.silence if self.ends_by is None else \
            max(0.0, min(self.silence, self.ends_by - time.monotonic()))

    def _overdue(self) -> None:
        if self.ends_by is not None and time.monotonic() >= self.ends_by:
            raise Hung(True, overdue_why(self.timeout or 0.0, self.grace, "its Ray actor",
                                         "the actor"))

    def silent(self, answers: Answers) -> None:
        """After a wait that brought nothing: raises Hung unless the run may
        still end by itself."""
        self._overdue()
        if answers(self._left()):
            return
        self._overdue()  # the question was cut short by the deadline
        raise Hung(False, unanswered_why(self.silence, "the Ray actor running this run"))

    def messages(self, ray: Any, stream: Any, answers: Answers) -> Iterator[tuple[Any, ...]]:
        """The run's messages from its actor's stream, each waited for within
        the bounds; raises Hung past them."""
        while True:
            ready, _ = ray.wait([stream], timeout=self._left())
            if not ready:
                self.silent(answers)
                continue
            try:
                ref = next(stream)
            except StopIteration:
                return
            # Ready means here already: a get that still waits is a hang too.
            yield ray.get(ref, timeout=self.silence)
