"""Nothing waits for ever for a worker process that is alive but answers
nothing (spearpy/executors/procs_watch.py): here a real worker stopped with
SIGSTOP mid-run. A run on it with a timeout ends `timeout` once it outlives
its deadline and a grace; without one, its runs end `worker_lost` once the
worker, silent under runs, does not answer a ping (a journaled run resumes
on another worker). The worker is killed and replaced. Before the watch
every such run waited for the stopped worker for ever: these failed with
'the run never ended' after Watch's guard (WAIT_S), not by hanging.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

from spearpy import HostConfig
from spearpy.durable import JournalSpec
from spearpy.executors.base import RUN_RESUMED
from spearpy.executors.procs import ProcessRuns
from tests.test_executors import HELLO, LOOP, WAIT_S, Watch, _submit, _wait_until
from tests.test_serve_api import slow_script


@contextmanager
def _procs(tmp_path: Path, workers: int, grace: float, silence: float
           ) -> Iterator[ProcessRuns]:
    config = HostConfig(backend=f"scripted:{slow_script(tmp_path, 0)}", cache_dir=None)
    runs = ProcessRuns(config, 2 * workers, workers=workers, grace=grace, silence=silence)
    runs.start()
    try:
        yield runs
    finally:
        for pid in runs.worker_pids():  # a test that failed leaves none stopped
            with suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
        runs.close()


def _stop(runs: ProcessRuns, *watches: Watch) -> int:
    for watch in watches:
        assert watch.started.wait(WAIT_S)
    [pid] = runs.worker_pids(busy=True)
    os.kill(pid, signal.SIGSTOP)
    return pid


def test_a_run_past_its_deadline_on_a_stopped_worker_ends_timeout(tmp_path: Path) -> None:
    """The worker cannot end the run at its 5 s deadline: 1 s after it the
    worker is killed and the run ends as a run past its deadline does; the
    worker's other run, without a timeout, is lost with it, saying why. The
    silence bound is far off, so the deadline decides."""
    with _procs(tmp_path, 1, grace=1.0, silence=3600.0) as runs:
        busy = _submit(runs, "busy", LOOP)
        looping = _submit(runs, "loop", LOOP, limits={"timeout": 5})
        pid = _stop(runs, busy, looping)

        ended = looping.result()
        assert (ended.outcome, ended.exit_code) == ("timeout", 124), ended
        assert "5 s deadline" in ended.message and f"pid {pid}" in ended.message, ended.message
        assert "killed" in ended.message
        lost = busy.result()
        assert lost.outcome == "worker_lost", lost
        assert f"pid {pid}" in lost.message and "deadline" in lost.message, lost.message

        _wait_until(lambda: runs.ready() and pid not in runs.worker_pids(), "a replacement")
        assert _submit(runs, "after", HELLO).result().outcome == "exited"
        assert runs.workers_lost == 1


def test_a_stopped_worker_that_does_not_answer_a_ping_loses_its_runs(tmp_path: Path) -> None:
    """Silent runs on a worker that answers go on (pinged several times over);
    once it is stopped, it does not answer, and its runs end worker_lost."""
    with _procs(tmp_path, 1, grace=3600.0, silence=1.0) as runs:
        first = _submit(runs, "first", LOOP)
        second = _submit(runs, "second", LOOP)
        assert first.started.wait(WAIT_S) and second.started.wait(WAIT_S)
        time.sleep(4.0)  # four silences: slow is not hung
        assert not first.ended.is_set() and not second.ended.is_set()
        assert runs.workers_lost == 0
        pid = _stop(runs)

        for watch in (first, second):
            lost = watch.result()
            assert (lost.outcome, lost.exit_code) == ("worker_lost", 75), lost
            assert f"pid {pid}" in lost.message and "stopped answering" in lost.message, \
                lost.message
        _wait_until(lambda: runs.ready() and pid not in runs.worker_pids(), "a replacement")
        assert _submit(runs, "after", HELLO).result().outcome == "exited"
        assert runs.workers_lost == 1


def test_a_journaled_run_on_a_hung_worker_resumes_on_another(tmp_path: Path) -> None:
    """As for a worker that dies: the run goes on elsewhere from its journal,
    its caller told first."""
    with _procs(tmp_path, 2, grace=3600.0, silence=1.0) as runs:
        looping = _submit(runs, "loop", LOOP, journal=JournalSpec(tmp_path / "loop.jsonl"))
        pid = _stop(runs, looping)

        _wait_until(lambda: looping.kinds.count("run_start") == 2 or looping.ended.is_set(),
                    "the run to start again")
        assert not looping.ended.is_set(), looping.ends
        assert looping.kinds.index(RUN_RESUMED) < looping.kinds.index("run_start", 1), \
            looping.kinds
        assert pid not in runs.worker_pids()
        runs.cancel("loop")
        assert looping.result().outcome == "cancelled"
