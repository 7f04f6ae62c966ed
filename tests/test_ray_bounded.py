"""Nothing waits for ever for a Ray actor that does not answer (its process
stopped with SIGSTOP: alive to Ray, so nothing fails, but it answers
nothing). `RayRuns.worker_pids` leaves it out, and counts it again once it
answers; a run on it ends `timeout` once it outlives its deadline and a
grace, or, without a timeout, `worker_lost` once the actor does not answer
a ping after the run went silent (spearpy/executors/ray_watch.py); the
actor is killed and Ray restarts it. Before the fixes both waited for the
stopped actor for ever.

On test_batch_ray.py's local two-CPU Ray cluster. Skipped
without the [ray] extra.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from tests import test_batch_ray as _batch_ray_tests
from tests.test_executors import run_scenario

pytestmark = pytest.mark.skipif(importlib.util.find_spec("ray") is None,
                                reason="needs the [ray] extra")
cluster = _batch_ray_tests.cluster  # a local two-CPU Ray cluster in a process of its own

# In a process of its own: a Ray driver keeps its first cluster's
# credentials for the life of the process (test_executors.py does the same).
# worker_pids runs on a thread so a hang is reported, not inherited.
_SCENARIO = """
import json, os, signal, sys, threading
from pathlib import Path
from spearpy import HostConfig
from spearpy.executors.ray_runs import RayRuns
from tests.test_serve_api import slow_script

runs = RayRuns(sys.argv[1], HostConfig(backend=f"scripted:{slow_script(Path(sys.argv[2]), 0)}",
                                       cache_dir=None), 2, actors=2)
runs.start()
seen = {}
stopped = None
try:
    seen["before"] = before = runs.worker_pids()
    stopped = before[0]
    os.kill(stopped, signal.SIGSTOP)
    got = []
    asking = threading.Thread(target=lambda: got.append(runs.worker_pids(wait=2.0)),
                              daemon=True)
    asking.start()
    asking.join(120)  # far past the 2 s it may wait: a hang, not slowness
    seen["answered"] = not asking.is_alive()
    seen["while_stopped"] = got[0] if got else None
    os.kill(stopped, signal.SIGCONT)
    stopped = None
    seen["after"] = runs.worker_pids()
finally:
    if stopped is not None:
        os.kill(stopped, signal.SIGCONT)
    runs.close()
print(json.dumps(seen))
"""


def test_an_actor_that_does_not_answer_is_left_out_of_worker_pids(
        cluster: str, tmp_path: Path) -> None:
    seen = run_scenario(_SCENARIO, cluster, str(tmp_path))
    stopped, other = seen["before"]
    assert seen["answered"] is True, "worker_pids hung on the stopped actor"
    assert seen["while_stopped"] == [other]
    assert seen["after"] == [stopped, other]


# A run whose actor is stopped mid-run (SIGSTOP: alive to Ray, answering
# nothing). Before the fix the run's follower waited for the actor's next
# message for ever; the run's Watch here waits WAIT_S for the end and fails
# the scenario if none comes. argv: cluster, tmp dir, the run's limits as
# JSON, then RayRuns' grace and silence.
_STOPPED_SCENARIO = """
import json, os, signal, sys, time
from pathlib import Path
from spearpy import HostConfig
from spearpy.executors.ray_runs import RayRuns
from tests.test_executors import HELLO, LOOP, WAIT_S, _submit
from tests.test_serve_api import slow_script

limits = json.loads(sys.argv[3])
runs = RayRuns(sys.argv[1], HostConfig(backend=f"scripted:{slow_script(Path(sys.argv[2]), 0)}",
                                       cache_dir=None), 2, actors=1,
               grace=float(sys.argv[4]), silence=float(sys.argv[5]))
runs.start()
seen = {}
stopped = None
try:
    # Two runs on the one actor: the ping must not queue behind them.
    busy = _submit(runs, "busy", LOOP)
    looping = _submit(runs, "loop", LOOP, limits=limits)
    assert busy.started.wait(WAIT_S) and looping.started.wait(WAIT_S)
    if not limits:  # silent runs on an actor that answers go on: several pings' worth
        time.sleep(3 * float(sys.argv[5]))
    seen["alive_before_stop"] = not busy.ended.is_set() and not looping.ended.is_set()
    [stopped] = runs.worker_pids()
    os.kill(stopped, signal.SIGSTOP)
    ended = looping.result()  # fails after WAIT_S if the run hangs
    seen["ended"] = [ended.outcome, ended.exit_code, ended.message]
    seen["busy"] = busy.result().outcome  # the killed actor's other run
    seen["after"] = _submit(runs, "after", HELLO).result().outcome  # on the restarted actor
    seen["workers_lost"] = runs.workers_lost
finally:
    if stopped is not None:
        try:
            os.kill(stopped, signal.SIGCONT)
        except ProcessLookupError:
            pass  # killed, as it should be
    runs.close()
print(json.dumps(seen))
"""


def _stopped(cluster: str, tmp_path: Path, limits: dict[str, float], grace: float,
             silence: float) -> dict[str, object]:
    return run_scenario(_STOPPED_SCENARIO, cluster, str(tmp_path), json.dumps(limits),
                        str(grace), str(silence))


def test_a_run_past_its_deadline_on_a_stopped_actor_ends_timeout(
        cluster: str, tmp_path: Path) -> None:
    """The actor cannot end the run at its 5 s deadline: 1 s after it the
    actor is killed and the run ends as a run past its deadline does. The
    silence bound is far off, so the deadline decides."""
    seen = _stopped(cluster, tmp_path, {"timeout": 5}, grace=1, silence=600)
    outcome, exit_code, message = seen["ended"]  # type: ignore[misc]
    assert (outcome, exit_code) == ("timeout", 124)
    assert "5 s deadline" in message and "Ray actor" in message and "killed" in message
    assert seen["busy"] == "worker_lost"  # no timeout of its own: lost with its actor
    assert seen["after"] == "exited"
    assert seen["workers_lost"] == 1


def test_a_run_without_a_timeout_on_a_stopped_actor_ends_worker_lost(
        cluster: str, tmp_path: Path) -> None:
    """No deadline: silent runs wait while their actor answers pings (three
    silences' worth here), and end worker_lost once it stops answering."""
    seen = _stopped(cluster, tmp_path, {}, grace=1, silence=1)
    assert seen["alive_before_stop"] is True
    outcome, exit_code, message = seen["ended"]  # type: ignore[misc]
    assert (outcome, exit_code) == ("worker_lost", 75)
    assert "stopped answering" in message and "killed" in message
    assert seen["busy"] == "worker_lost"
    assert seen["after"] == "exited"
    assert seen["workers_lost"] == 1
