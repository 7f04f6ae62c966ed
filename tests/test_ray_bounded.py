"""`RayRuns.worker_pids` waits a bounded time for the actors' pids: an actor
that does not answer (its process stopped with SIGSTOP: alive to Ray, so
nothing fails, but it answers nothing) is left out instead of hanging the
caller, and counted again once it answers. Before the fix the call waited
for the stopped actor for ever.

On test_batch_ray.py's local two-CPU Ray cluster, two actors. Skipped
without the [ray] extra.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests import test_batch_ray as _batch_ray_tests

pytestmark = pytest.mark.skipif(importlib.util.find_spec("ray") is None,
                                reason="needs the [ray] extra")
cluster = _batch_ray_tests.cluster  # a local two-CPU Ray cluster in a process of its own
ROOT = Path(__file__).resolve().parents[1]

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
    done = subprocess.run([sys.executable, "-c", _SCENARIO, cluster, str(tmp_path)],
                          cwd=ROOT, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    stopped, other = seen["before"]
    assert seen["answered"] is True, "worker_pids hung on the stopped actor"
    assert seen["while_stopped"] == [other]
    assert seen["after"] == [stopped, other]
