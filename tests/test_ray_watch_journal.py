"""A journaled run on a Ray actor stopped with SIGSTOP (alive to Ray,
answering nothing) ends `timeout` once it outlives its deadline and the
grace, its actor killed (spearpy/executors/ray_watch.py), and its journal
ends `timeout` too, as on worker processes (test_watch_journal_end.py):
the driver writes the end once the killed actor's writer lock is gone.
Before, the journal was left as if cut by a crash, for a resume to go on
with live.

On test_batch_ray.py's local two-CPU Ray cluster. Skipped without the
[ray] extra.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from tests import test_batch_ray as _batch_ray_tests
from tests.test_executors import run_scenario

pytestmark = pytest.mark.skipif(importlib.util.find_spec("ray") is None,
                                reason="needs the [ray] extra")
cluster = _batch_ray_tests.cluster

# In a process of its own, as test_ray_bounded.py's scenarios. argv: the
# cluster, the tmp dir.
_SCENARIO = """
import json, os, signal, sys
from pathlib import Path
from spearpy import HostConfig
from spearpy.durable import JournalSpec
from spearpy.executors.ray_runs import RayRuns
from tests.test_executors import LOOP, WAIT_S, _submit
from tests.test_serve_api import slow_script

where = Path(sys.argv[2])
journal = where / "loop.jsonl"
runs = RayRuns(sys.argv[1], HostConfig(backend=f"scripted:{slow_script(where, 0)}",
                                       cache_dir=None), 1, actors=1, grace=1, silence=600)
runs.start()
seen = {}
stopped = None
try:
    looping = _submit(runs, "loop", LOOP, limits={"timeout": 3}, journal=JournalSpec(journal))
    assert looping.started.wait(WAIT_S)
    [stopped] = runs.worker_pids()
    os.kill(stopped, signal.SIGSTOP)
    ended = looping.result()
    # Read as its caller hears of the end.
    data = journal.read_bytes()
    seen["records"] = [json.loads(line) for line in data.split(b"\\n")[:-1]]
    seen["ended"] = [ended.outcome, ended.exit_code, ended.message]
finally:
    if stopped is not None:
        try:
            os.kill(stopped, signal.SIGCONT)
        except ProcessLookupError:
            pass  # killed, as it should be
    runs.close()
print(json.dumps(seen))
"""


def test_a_journaled_run_killed_past_its_deadline_on_ray_has_its_journal_ended(
        cluster: str, tmp_path: Path) -> None:
    seen = run_scenario(_SCENARIO, cluster, str(tmp_path))
    outcome, exit_code, message = seen["ended"]
    assert (outcome, exit_code) == ("timeout", 124), message
    assert "3 s deadline" in message and "Ray actor" in message, message
    records = seen["records"]
    assert [r["kind"] for r in records] == ["start", "end"], records
    assert (records[-1]["outcome"], records[-1]["exit_code"]) == ("timeout", 124)
