"""The shared executor layer (spearpy/executors) that `spearpy batch` and
`spearpy serve` both run on, driven directly: a run's events and its one
end, cancel, a worker that dies, workers that cannot (re)start, close.
Real guests, real worker processes, a real local Ray cluster."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from spearpy import Host, HostConfig
from spearpy.executors.base import Executor, ExecutorError, RunJob
from spearpy.executors.procs import ProcessRuns
from spearpy.executors.threads import ThreadRuns
from spearpy.host import LoadedModule
from spearpy.outcome import RunResult
from tests import test_batch_ray as _batch_ray_tests
from tests.test_serve_api import SAMPLES, slow_script

cluster = _batch_ray_tests.cluster  # a local two-CPU Ray cluster in a process of its own

ROOT = Path(__file__).resolve().parents[1]
HELLO = (SAMPLES / "c_hello.wasm").read_bytes()
LOOP = (SAMPLES / "c_infinite_loop.wasm").read_bytes()
# Only a guard against a hung test; no assertion is about time.
WAIT_S = 120.0


class Watch:
    """One run's callbacks: its events as they come, and every on_end call."""

    def __init__(self) -> None:
        self.kinds: list[str] = []
        self.ends: list[tuple[RunResult | None, BaseException | None]] = []
        self.started = threading.Event()
        self.ended = threading.Event()

    def on_event(self, event: Any) -> None:
        self.kinds.append(event.kind)
        if event.kind == "run_start":
            self.started.set()

    def on_end(self, result: RunResult | None, error: BaseException | None) -> None:
        self.ends.append((result, error))
        self.ended.set()

    def result(self) -> RunResult:
        assert self.ended.wait(WAIT_S), "the run never ended"
        time.sleep(0.2)  # room for a second, wrong on_end to show up
        [(result, error)] = self.ends  # exactly one end
        assert result is not None, error
        return result


def _submit(executor: Executor, key: str, wasm: bytes, *, stream: bool = True,
            cancel: threading.Event | None = None,
            local: tuple[Host | None, LoadedModule | None] = (None, None),
            watch: Watch | None = None, **fields: Any) -> Watch:
    watch = watch or Watch()
    job = RunJob(key, f"{key}.wasm", hashlib.sha256(wasm).hexdigest(), **fields)
    executor.submit(job, wasm, local[0], local[1], cancel or threading.Event(),
                    watch.on_event if stream else None, watch.on_end)
    return watch


def run_scenario(script: str, *args: str, timeout: float = 600) -> dict[str, Any]:
    """What `script`, run in a Python process of its own with `args`, printed
    last (as JSON). A Ray scenario runs so: a Ray driver keeps its first
    cluster's credentials for the life of the process."""
    done = subprocess.run([sys.executable, "-c", script, *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout, check=False)
    assert done.returncode == 0, done.stderr[-4000:]
    seen: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return seen


def _wait_until(check: Any, what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


@pytest.fixture
def config(tmp_path: Path) -> HostConfig:
    return HostConfig(backend=f"scripted:{slow_script(tmp_path, 0)}", cache_dir=None)


@pytest.fixture
def procs(config: HostConfig) -> Iterator[ProcessRuns]:
    runs = ProcessRuns(config, 2, workers=1)
    runs.start()
    try:
        yield runs
    finally:
        runs.close()


def test_a_run_in_a_worker_streams_its_events_or_carries_them(procs: ProcessRuns) -> None:
    streamed = _submit(procs, "a", HELLO, args=["x"])
    result = streamed.result()
    assert (result.outcome, result.exit_code) == ("exited", 0)
    assert b"hello from C" in (result.stdout or b"")
    assert streamed.kinds[0] == "run_start" and streamed.kinds[-1] == "run_end"
    # Not streamed: the events travel with the result when asked for.
    carried = _submit(procs, "b", HELLO, stream=False, collect_events=True)
    result = carried.result()
    assert carried.kinds == [] and [e.kind for e in result.events][-1] == "run_end"
    assert procs.disk_cache_hits == 0  # no disk cache in this config: nothing found in it


def test_a_killed_worker_ends_its_run_as_lost_and_is_replaced(procs: ProcessRuns) -> None:
    looping = _submit(procs, "loop", LOOP)
    assert looping.started.wait(WAIT_S)
    [pid] = procs.worker_pids(busy=True)
    os.kill(pid, signal.SIGKILL)
    lost = looping.result()
    assert (lost.outcome, lost.exit_code) == ("worker_lost", 75)
    assert f"pid {pid}" in lost.message and "SIGKILL" in lost.message
    assert procs.workers_lost == 1 and procs.failure is None
    _wait_until(lambda: procs.ready() and pid not in procs.worker_pids(), "a replacement")
    assert _submit(procs, "after", HELLO).result().outcome == "exited"


def test_cancel_ends_a_run_in_a_worker(procs: ProcessRuns) -> None:
    looping = _submit(procs, "loop", LOOP)
    assert looping.started.wait(WAIT_S)
    procs.cancel("loop")
    assert looping.result().outcome == "cancelled"
    # Cancelled before it was submitted: it starts cancelled.
    cancel = threading.Event()
    cancel.set()
    assert _submit(procs, "early", LOOP, cancel=cancel).result().outcome == "cancelled"
    assert procs.worker_pids()  # the worker lives on


def test_close_ends_every_run_still_going(config: HostConfig) -> None:
    runs = ProcessRuns(config, 2, workers=1)
    runs.start()
    [pid] = runs.worker_pids()
    looping = _submit(runs, "loop", LOOP)
    assert looping.started.wait(WAIT_S)
    runs.close()
    assert looping.result().outcome in ("cancelled", "worker_lost")
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_workers_that_cannot_start_fail_the_start(tmp_path: Path) -> None:
    script = slow_script(tmp_path, 0)
    config = HostConfig(backend=f"scripted:{script}", cache_dir=None)
    script.unlink()  # a worker's Host cannot read it
    runs = ProcessRuns(config, 1, workers=1)
    try:
        with pytest.raises(ExecutorError, match="did not start"):
            runs.start()
    finally:
        runs.close()


def test_workers_that_cannot_come_back_fail_the_executor(tmp_path: Path) -> None:
    # A worker dies and its replacements cannot start (here: their Host's
    # script is gone): the executor gives up after a few, instead of starting
    # workers forever, and says so; runs end as lost at once.
    script = slow_script(tmp_path, 0)
    runs = ProcessRuns(HostConfig(backend=f"scripted:{script}", cache_dir=None), 1, workers=1)
    runs.start()
    try:
        script.unlink()
        [pid] = runs.worker_pids()
        os.kill(pid, signal.SIGKILL)
        _wait_until(lambda: runs.failure is not None, "the executor to give up")
        assert "before they are ready" in str(runs.failure)
        assert runs.workers_started == 4  # the first, then three that could not start
        assert runs.worker_pids() == []
        lost = _submit(runs, "late", HELLO).result()
        assert lost.outcome == "worker_lost" and "no worker process" in lost.message
    finally:
        runs.close()


def test_threads_run_on_the_callers_host_and_cancel_by_event(config: HostConfig) -> None:
    runs = ThreadRuns(2)
    with Host(config) as host:
        module = host.load(LOOP, "loop.wasm")
        try:
            cancel = threading.Event()
            looping = _submit(runs, "loop", LOOP, cancel=cancel, local=(host, module))
            assert looping.started.wait(WAIT_S)
            cancel.set()
            assert looping.result().outcome == "cancelled"
            with pytest.raises(ValueError, match="loaded in this process"):
                _submit(runs, "nowhere", LOOP)  # no Host given: nothing to run it on
        finally:
            runs.close()


# In a process of its own: a Ray driver keeps its first cluster's credentials
# for the life of the process, and test_batch_ray.py's cluster has others.
_RAY_SCENARIO = """
import json, os, signal, sys
from spearpy import HostConfig
from spearpy.executors.ray_runs import RayRuns
from tests.test_executors import HELLO, LOOP, WAIT_S, _submit
from tests.test_serve_api import slow_script
from pathlib import Path

runs = RayRuns(sys.argv[1], HostConfig(backend=f"scripted:{slow_script(Path(sys.argv[2]), 0)}",
                                       cache_dir=None), 2, actors=1)
runs.start()
seen = {}
try:
    looping = _submit(runs, "loop", LOOP)
    seen["streamed"] = looping.started.wait(WAIT_S)  # live from the actor
    [pid] = runs.worker_pids()
    os.kill(pid, signal.SIGKILL)
    lost = looping.result()
    seen["lost"] = [lost.outcome, lost.message]
    # Submitted while the only actor restarts: it runs once it is back.
    seen["after"] = _submit(runs, "after", HELLO).result().outcome
    seen["workers_lost"] = runs.workers_lost
    again = _submit(runs, "loop2", LOOP)
    again.started.wait(WAIT_S)
    runs.cancel("loop2")
    seen["cancelled"] = again.result().outcome
finally:
    runs.close()
print(json.dumps(seen))
"""


@pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason="needs the [ray] extra")
def test_a_killed_ray_actor_loses_its_run_and_the_executor_goes_on(
        cluster: str, tmp_path: Path) -> None:
    seen = run_scenario(_RAY_SCENARIO, cluster, str(tmp_path))
    assert seen["streamed"] is True
    outcome, message = seen["lost"]
    assert outcome == "worker_lost" and "Ray actor" in message
    assert seen["after"] == "exited" and seen["workers_lost"] == 1
    assert seen["cancelled"] == "cancelled"
