"""A journaled run the process executor's watch kills for outliving its
deadline (spearpy/executors/procs_watch.py) ends `timeout`, and its journal
says so, as the journal of a run its worker ended at the deadline does.

Here a real worker is stopped with SIGSTOP under c_infinite_loop, which
loops for ever: the worker cannot end the run at its deadline, so the watch
kills it `grace` later. Before the executor ended its journal, the journal
looked like one cut by a crash: `Host.resume` went on with it live, looping
again (for ever: it does not restore the run's own limits, only the Host's),
where a run that is over is refused.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from spearpy import Host, HostConfig
from spearpy.durable import JournalSpec
from spearpy.journal import JournalError
from tests.test_executors import LOOP, WAIT_S
from tests.test_procs_watch import _procs, _stop, _submit
from tests.test_serve_api import slow_script


def _records(journal: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in journal.read_bytes().split(b"\n")[:-1]]


def _host(tmp_path: Path) -> Host:
    """A Host with the flags the executor's runs had (_procs)."""
    return Host(HostConfig(backend=f"scripted:{slow_script(tmp_path, 0)}", cache_dir=None))


def test_a_journaled_run_killed_past_its_deadline_has_its_journal_ended(
        tmp_path: Path) -> None:
    journal = tmp_path / "loop.jsonl"
    with _procs(tmp_path, 1, grace=1.0, silence=3600.0) as runs:
        looping = _submit(runs, "loop", LOOP, limits={"timeout": 3},
                          journal=JournalSpec(journal))
        pid = _stop(runs, looping)
        ended = looping.result()
        assert (ended.outcome, ended.exit_code) == ("timeout", 124), ended
        assert f"pid {pid}" in ended.message, ended.message
        # Read at once: its caller hears of the end after the journal says it.
        records = _records(journal)
    assert [r["kind"] for r in records] == ["start", "end"], records
    assert (records[-1]["outcome"], records[-1]["exit_code"]) == ("timeout", 124)

    with _host(tmp_path) as host, pytest.raises(JournalError, match="has ended"):
        host.resume(JournalSpec(journal), module=LOOP)
    assert _records(journal) == records  # nothing appended

    env = {k: v for k, v in os.environ.items() if not k.startswith("SPEARPY_")}
    shown = subprocess.run([sys.executable, "-m", "spearpy", "show", str(journal)],
                           env=env, capture_output=True, text=True, timeout=WAIT_S, check=False)
    assert shown.returncode == 0, shown.stderr
    assert "timeout" in shown.stdout.splitlines()[-1], shown.stdout


def test_a_journaled_run_lost_with_a_hung_worker_is_left_to_resume(tmp_path: Path) -> None:
    """A worker taken for hung by its silence loses its runs, which a journal
    resumes (docs/durable.md, "Lost workers"); past `max_resumes` the run
    ends worker_lost and its journal stays open: it was cut, not ended, so
    it can still be resumed."""
    journal = tmp_path / "lost.jsonl"
    with _procs(tmp_path, 1, grace=3600.0, silence=1.0) as runs:
        runs.max_resumes = 0
        looping = _submit(runs, "lost", LOOP, journal=JournalSpec(journal))
        pid = _stop(runs, looping)
        lost = looping.result()
        assert (lost.outcome, lost.exit_code) == ("worker_lost", 75), lost
        assert f"pid {pid}" in lost.message, lost.message
    assert [r["kind"] for r in _records(journal)] == ["start"]

    # It goes on live (it loops again), until cancelled.
    cancel, kinds = threading.Event(), []

    def on_event(event: Any) -> None:
        kinds.append(event.kind)
        if event.kind == "run_start":
            cancel.set()

    with _host(tmp_path) as host:
        resumed = host.resume(JournalSpec(journal), module=LOOP, cancel=cancel,
                              on_event=on_event)
    assert resumed.outcome == "cancelled", resumed
    assert "run_start" in kinds
    records = _records(journal)
    assert [r["kind"] for r in records] == ["start", "end"], records
    assert records[-1]["outcome"] == "cancelled"
