"""What an executor concludes about a worker that is alive but answers
nothing (stopped with SIGSTOP, deadlocked in native code, cut off): the
bounds both the process executor (procs_watch.py) and the Ray executor
(ray_watch.py) put on it, and the words its runs end with.

- A run with a timeout (its own `timeout` limit, or the Host's) that has
  not ended `grace` seconds after its deadline is stuck: its worker ends a
  run at its deadline by itself. It ends `timeout`, as a run past its
  deadline does, and its worker is killed.
- A worker that sent nothing for `silence` seconds while it runs something
  is asked whether it still answers, on a path that never waits behind its
  runs; one that does not answer within `silence` more is taken for hung,
  killed, and its runs are lost as in a death (journaled ones resume). A run
  without a timeout waits as long as its worker answers: slow is not hung.
"""

from __future__ import annotations

import math
from typing import Any

from spearpy.outcome import Outcome, RunResult

# Past its deadline, the time a run has to end on its worker (an epoch
# tick, its transcript and journal written, a module compiled before the
# clock started there) before it is taken for stuck.
GRACE_S = 60.0
# A worker silent this long is asked whether it answers, and is taken for
# hung if it does not answer within as long again.
SILENCE_S = 30.0


def check_bound(name: str, seconds: float) -> None:
    """Refuse a `grace` or `silence` (named `name`) that is no positive,
    finite number of seconds: zero would take every worker for hung, and
    infinity or NaN would wait for a hung one for ever."""
    if not isinstance(seconds, (int, float)) or isinstance(seconds, bool) or \
            not math.isfinite(seconds) or seconds <= 0:
        raise ValueError(f"{name} must be a positive, finite number of seconds, "
                         f"not {seconds!r}")


def run_timeout(limits: dict[str, Any], config: dict[str, Any]) -> float | None:
    """The run's timeout as its worker applies it: its own limit, or the Host's."""
    value = limits["timeout"] if "timeout" in limits else config.get("timeout")
    return float(value) if value else None


def timed_out(why: str) -> RunResult:
    """The end of a run that outlived its deadline on a worker that was killed."""
    return RunResult.ended_as(Outcome.TIMEOUT.value, why)


def overdue_why(timeout: float, grace: float, on: str, killed: str) -> str:
    """Why a run ends `timeout` after the worker it ran `on` ("its Ray
    actor"), `killed` ("the actor"), was killed."""
    return (f"the run exceeded its {timeout:g} s deadline and did not end on {on} "
            f"within {grace:g} s more: {killed} was killed")


def unanswered_why(silence: float, worker: str, what: str = "the run") -> str:
    """Why `worker` ("the Ray actor running this run") was killed for silence."""
    return (f"{worker} stopped answering (nothing from {what} for {silence:g} s, no "
            f"answer to a ping within {silence:g} s more): it was killed")
