"""How long the Ray executor waits for a run's next message, and what it
concludes when none comes (ray_runs.RayRuns._follow).

Ray reports an actor whose process or node died, but not one that is alive
and answers nothing: a process stopped (SIGSTOP) or deadlocked, a node cut
off before Ray noticed. Waiting for such an actor's next message would hang
the caller for ever, so every wait is bounded twice over:

- by the run's own deadline (its `timeout` limit) plus `grace`: the actor
  ends a run at its deadline by itself, so a run still going `grace`
  seconds after it is stuck there; it ends `timeout`, as a run past its
  deadline does, and its actor is killed (Ray restarts it).
- by `silence`: a run that sent nothing for that long has its actor asked
  whether it still answers (on a concurrency group of its own, so the
  question never queues behind runs); an actor that does not answer within
  `silence` more is taken for hung, killed, and its runs are lost as in a
  death (journaled ones resume). A run without a timeout waits as long as
  its actor answers: slow is not hung.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

from spearpy.outcome import Outcome, RunResult, exit_code_for

# Past its deadline, the time a run has to end on its actor (an epoch tick,
# its transcript and journal written, a module compiled before the clock
# started on the actor) before it is taken for stuck.
GRACE_S = 60.0
# A run silent this long has its actor asked whether it answers, and the
# actor is taken for hung if it does not answer within as long again
# (ray_runs._COME_BACK_S, the time after which an actor is taken for gone).
SILENCE_S = 30.0
# The actor's concurrency group for that question: one thread of its own.
WATCH_GROUP = "watch"

# (wait) -> whether the run's actor answered within `wait` seconds
Answers = Callable[[float], bool]


class Hung(Exception):
    """Nothing came from a run's actor within its bounds. `timed_out`: the
    run outlived its deadline and grace (else the actor stopped answering)."""

    def __init__(self, timed_out: bool, why: str) -> None:
        super().__init__(why)
        self.timed_out = timed_out
        self.why = why


def run_timeout(limits: dict[str, Any], config: dict[str, Any]) -> float | None:
    """The run's timeout as its actor applies it: its own limit, or the Host's."""
    value = limits["timeout"] if "timeout" in limits else config.get("timeout")
    return float(value) if value else None


def timed_out(why: str) -> RunResult:
    """The end of a run that outlived its deadline on an actor that was killed."""
    return RunResult(run_id="", exit_code=exit_code_for(Outcome.TIMEOUT),
                     outcome=Outcome.TIMEOUT.value, message=why)


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
            raise Hung(True, f"the run exceeded its {self.timeout:g} s deadline and did not "
                             f"end on its Ray actor within {self.grace:g} s more: the actor "
                             f"was killed")

    def silent(self, answers: Answers) -> None:
        """After a wait that brought nothing: raises Hung unless the run may
        still end by itself."""
        self._overdue()
        if answers(self._left()):
            return
        self._overdue()  # the question was cut short by the deadline
        raise Hung(False, f"the Ray actor running this run stopped answering (nothing from "
                          f"the run for {self.silence:g} s, no answer to a ping within "
                          f"{self.silence:g} s more): it was killed")

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
