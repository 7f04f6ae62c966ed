"""`spearpy serve --watch-grace S --watch-silence S`: the bounds the process
executor's watch (spearpy/executors/procs_watch.py) puts on a worker that
is alive but answers nothing, set by the operator (defaults 60 s and 30 s).
A real service process, its real worker stopped with SIGSTOP under
c_infinite_loop; the messages say which bound ended the run, and so which
value the service took. Bad values are refused before the service starts.
"""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from spearpy import HostConfig
from spearpy.executors.procs import ProcessRuns
from spearpy.executors.ray_runs import RayRuns
from spearpy.journal import SQLiteJournalStore
from spearpy.journal.records import End
from spearpy.serve import BackgroundServer, ServeConfig, create_app
from spearpy.serve.runs import JOURNALS
from tests.test_serve_api import ROOT, modules_dir, sse_events, wait_for
from tests.test_serve_durability import MULTI_TOOL, start_service

PATIENCE_S = 120.0  # only a guard against a hung test


@pytest.fixture
def services() -> Iterator[list[subprocess.Popen[str]]]:
    started: list[subprocess.Popen[str]] = []
    yield started
    for proc in started:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _worker_of(service: int) -> int:
    """The pid of the service's one worker process."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue  # not a process, or gone meanwhile
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if ppid == service and b"spearpy.executors.worker" in cmdline:
            found.append(int(entry.name))
    assert len(found) == 1, found
    return found[0]


def _stopped_run(url: str, service: int, body: dict[str, Any]) -> tuple[dict[str, Any], int]:
    """Start a run of c_infinite_loop, stop its worker, and wait for its end."""
    with httpx.Client(base_url=url, timeout=30) as client:
        run = client.post("/v1/runs", json={"module": "c_infinite_loop", **body}).json()
        with client.stream("GET", run["urls"]["events"]) as response:
            assert next(sse_events(response))[1]["kind"] == "run_start"
        worker = _worker_of(service)
        os.kill(worker, signal.SIGSTOP)  # the watch kills it: SIGKILL ends a stopped process
        return wait_for(client, run["id"], timeout=PATIENCE_S), worker


def _serve(tmp_path: Path, *flags: str) -> list[str]:
    return ["--modules", str(modules_dir(tmp_path)), "--state-dir", str(tmp_path / "state"),
            "--backend", MULTI_TOOL, "--executor", "processes", "--workers", "1", *flags]


def test_a_short_silence_takes_a_stopped_worker_for_hung(
        tmp_path: Path, services: list[subprocess.Popen[str]]) -> None:
    proc, url = start_service(_serve(tmp_path, "--watch-silence", "1", "--no-journal"))
    services.append(proc)
    ended, worker = _stopped_run(url, proc.pid, {})
    assert (ended["outcome"], ended["exit_code"]) == ("worker_lost", 75), ended
    assert f"pid {worker}" in ended["message"], ended["message"]
    assert "nothing from it for 1 s, no answer to a ping within 1 s more" in ended["message"]


def test_a_short_grace_ends_a_stuck_run_timeout_for_good(
        tmp_path: Path, services: list[subprocess.Popen[str]]) -> None:
    """Its journal is ended too (docs/durable.md, "Lost workers"): a service
    that crashes and restarts leaves the run as it ended."""
    flags = _serve(tmp_path, "--watch-grace", "1", "--watch-silence", "3600")
    proc, url = start_service(flags)
    services.append(proc)
    ended, worker = _stopped_run(url, proc.pid, {"limits": {"timeout": 2}})
    assert (ended["outcome"], ended["exit_code"]) == ("timeout", 124), ended
    assert f"pid {worker}" in ended["message"] and "2 s deadline" in ended["message"] and \
        "within 1 s more" in ended["message"], ended["message"]
    store = SQLiteJournalStore(tmp_path / "state" / JOURNALS)
    try:
        end = store.last_record(ended["id"])
    finally:
        store.close()
    assert isinstance(end, End) and (end.outcome, end.exit_code) == ("timeout", 124), end

    proc.kill()  # a crash: no shutdown
    proc.wait()
    proc, url = start_service(flags)
    services.append(proc)
    with httpx.Client(base_url=url, timeout=30) as client:
        after = client.get(f"/v1/runs/{ended['id']}").json()
    assert (after["status"], after["outcome"]) == (ended["status"], "timeout"), after


def test_a_journaled_run_on_hung_workers_resumes_then_ends_worker_lost(
        tmp_path: Path) -> None:
    """Lost with a worker taken for hung, a journaled run is not over: it
    goes on from its journal on the worker that replaced it (docs/durable.md,
    "Lost workers"), at most `max_resumes` times; then it ends worker_lost,
    and a service started again on its state leaves it so. Each worker is
    stopped once the run runs on it (the watch pings only a worker with
    runs: one busy shows the run went on there)."""
    config = ServeConfig(modules_dir=modules_dir(tmp_path), state_dir=tmp_path / "state",
                         host=HostConfig(backend=MULTI_TOOL, cache_dir=None),
                         executor="processes", workers=1, journal=True, watch_silence=1.0)
    stopped: list[int] = []
    with BackgroundServer(create_app(config), grace=0.5) as server, \
            httpx.Client(base_url=server.url, timeout=30) as client:
        executor = server.app.state.service.runs.executor
        assert isinstance(executor, ProcessRuns)
        run = client.post("/v1/runs", json={"module": "c_infinite_loop"}).json()
        for attempt in range(config.max_resumes + 1):
            # Ready too: a replacement takes the run before it is ready, and
            # one stopped while it starts is bounded by the start's 120 s.
            _wait(lambda: executor.ready() and
                  [p for p in executor.worker_pids(busy=True) if p not in stopped],
                  f"the run on worker {attempt + 1}")
            [worker] = executor.worker_pids(busy=True)
            stopped.append(worker)
            os.kill(worker, signal.SIGSTOP)  # the watch kills it: SIGKILL ends it stopped
        ended = wait_for(client, run["id"], timeout=PATIENCE_S)
        with client.stream("GET", f"/v1/runs/{run['id']}/events") as response:
            kinds = [record["kind"] for _seq, record in sse_events(response)]
    assert (ended["outcome"], ended["exit_code"]) == ("worker_lost", 75), ended
    assert f"pid {stopped[-1]}" in ended["message"], ended["message"]
    assert "stopped answering" in ended["message"], ended["message"]
    assert "resumed 2 times before" in ended["message"], ended["message"]
    assert kinds.count("run_resumed") == config.max_resumes, kinds

    with BackgroundServer(create_app(config), grace=0.5) as server, \
            httpx.Client(base_url=server.url, timeout=30) as client:
        after = client.get(f"/v1/runs/{run['id']}").json()
    assert (after["status"], after["outcome"]) == (ended["status"], "worker_lost"), after


def _wait(check: Any, what: str) -> None:
    deadline = time.monotonic() + PATIENCE_S
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


@pytest.mark.parametrize("flag", ["--watch-grace", "--watch-silence"])
@pytest.mark.parametrize("value", ["0", "-1", "inf", "nan", "soon"])
def test_bad_bounds_are_refused_before_the_service_starts(
        tmp_path: Path, flag: str, value: str) -> None:
    mods = tmp_path / "modules"
    mods.mkdir()
    done = subprocess.run([sys.executable, "-m", "spearpy", "serve", "--modules", str(mods),
                           "--state-dir", str(tmp_path / "state"), "--port", "0",
                           f"{flag}={value}"], cwd=ROOT, capture_output=True, text=True,
                          timeout=PATIENCE_S, check=False)
    assert done.returncode == 2, (done.returncode, done.stderr)
    field = flag[2:].replace("-", "_")
    assert f"Invalid value for '{flag}'" in done.stderr or \
        f"{field} must be a positive, finite number of seconds, not {value}" in done.stderr, \
        done.stderr
    assert "listening on" not in done.stderr
    assert not (tmp_path / "state").exists()


@pytest.mark.parametrize("value", [0.0, -1.0, math.inf, math.nan])
def test_bad_bounds_are_refused_by_the_config_and_the_executor(
        tmp_path: Path, value: float) -> None:
    for field in ("watch_grace", "watch_silence"):
        with pytest.raises(ValueError, match=f"{field} must be a positive, finite number"):
            ServeConfig(modules_dir=tmp_path, **{field: value})
    for name in ("grace", "silence"):
        with pytest.raises(ValueError, match=f"{name} must be a positive, finite number"):
            ProcessRuns(HostConfig(), 1, **{name: value})
        with pytest.raises(ValueError, match=f"{name} must be a positive, finite number"):
            RayRuns("local", HostConfig(), 1, **{name: value})  # before Ray is imported
