"""The service resumes its own runs (issue 31, docs/serve.md "Resuming runs").

A real `spearpy serve` process is SIGKILLed while a run waits on a slow
model (a ScriptedServer in this process, which counts every completion it is
asked); restarted on the same state directory, it finishes the run from its
journal: the run ends `exited` with the output of an uninterrupted run, the
model answered each completion once (the one in flight at the kill may be
asked again), and an SSE client reconnecting with Last-Event-ID gets the
rest of the run under increasing ids. A worker process SIGKILLed under a run
hands the run to another worker the same way, a bounded number of times.
Before the fix the restarted service marked the run `interrupted`, and the
dead worker's run ended `worker_lost`.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from spearpy import HostConfig
from spearpy.serve import BackgroundServer, ServeConfig, create_app
from spearpy.serve.procs import ProcessRuns
from spearpy.testing import ScriptedServer
from tests.test_durable_cli import MULTI_SCRIPT, MULTI_TOOL_MESSAGES, _slow, _tool_messages
from tests.test_serve_api import MULTI_TOOL_STDOUT, modules_dir, sse_events
from tests.test_serve_durability import processes, start_service

services = processes  # the service processes a test starts, killed at its end

# Generous: a service starts in ~1 s, but 8 engineers share 2 cores.
PATIENCE_S = 90.0
# Each completion takes this long: the run is still waiting on the model
# when the test kills what runs it.
DELAY_MS = 700


@pytest.fixture
def model() -> Iterator[ScriptedServer]:
    with ScriptedServer(_slow(MULTI_SCRIPT, DELAY_MS)) as server:
        yield server


def _journal_kinds(client: httpx.Client, run: dict[str, Any]) -> list[str]:
    """Every step's kind, read through the paged journal route."""
    kinds: list[str] = []
    page: str | None = run["urls"]["journal"] + "?limit=3"
    while page is not None:
        answer = client.get(page)
        if answer.status_code == 404:  # the run has not written its start yet
            return kinds
        kinds.extend(step["kind"] for step in answer.json()["steps"])
        page = answer.json()["next"]
    return kinds


def _start_mid_request(client: httpx.Client, model: ScriptedServer) -> dict[str, Any]:
    """A c_multi_tool run, once its journal holds a completion (and so >= 2
    steps) and the model holds a request the journal has no answer to yet."""
    run: dict[str, Any] = client.post("/v1/runs", json={"module": "c_multi_tool"}).json()
    assert run["urls"]["journal"] == f"/v1/runs/{run['id']}/journal"
    deadline = time.monotonic() + PATIENCE_S
    while time.monotonic() < deadline:
        kinds = _journal_kinds(client, run)
        answered = kinds.count("chat.completion")
        if answered >= 1 and len(model.requests) == answered + 1:
            return run
        time.sleep(0.02)
    pytest.fail(f"no completion in flight after one journaled ({_journal_kinds(client, run)})")


def _assert_asked_once_each(model: ScriptedServer) -> None:
    asked = _tool_messages(model)
    assert sorted(set(asked)) == MULTI_TOOL_MESSAGES, asked
    # Only the completion in flight at the kill may be asked twice.
    assert len(asked) <= len(MULTI_TOOL_MESSAGES) + 1, asked


def _wait_finished(client: httpx.Client, run_id: str) -> dict[str, Any]:
    deadline = time.monotonic() + PATIENCE_S
    while time.monotonic() < deadline:
        view: dict[str, Any] = client.get(f"/v1/runs/{run_id}").json()
        if view["status"] in ("finished", "interrupted"):
            return view
        time.sleep(0.05)
    raise AssertionError(f"run {run_id} did not end")


def _follow(url: str, run_id: str, last_id: int | None, into: list[tuple[int, dict[str, Any]]]
            ) -> None:
    """The run's events after `last_id` (Last-Event-ID) until the stream ends."""
    headers = {} if last_id is None else {"Last-Event-ID": str(last_id)}
    # A TransportError: the service was killed under the stream (what came
    # before it is in `into` already: extend appends as it reads).
    with contextlib.suppress(httpx.TransportError), \
            httpx.Client(base_url=url, timeout=PATIENCE_S) as client, \
            client.stream("GET", f"/v1/runs/{run_id}/events", headers=headers) as response:
        into.extend(sse_events(response))


@pytest.mark.parametrize("executor", ["threads", "processes"])
def test_a_killed_service_resumes_its_run_where_the_journal_left_it(
        tmp_path: Path, model: ScriptedServer, services: list[subprocess.Popen[str]],
        executor: str) -> None:
    # processes: the worker outlives its parent by a moment; it must not end
    # the journal (as `cancelled`) on its way out.
    args = ["--modules", str(modules_dir(tmp_path)), "--state-dir", str(tmp_path / "state"),
            "--base-url", model.base_url, "--model", "m", "--api-key-env", "",
            "--executor", executor, "--workers", "1", "--timeout", "120"]
    first, url = start_service(args)
    services.append(first)
    before: list[tuple[int, dict[str, Any]]] = []
    with httpx.Client(base_url=url, timeout=PATIENCE_S) as client:
        run = _start_mid_request(client, model)
        watcher = threading.Thread(target=_follow, args=(url, run["id"], None, before))
        watcher.start()
        # The client has followed the run up to the completion in flight.
        deadline = time.monotonic() + PATIENCE_S
        while [r["kind"] for _i, r in before].count("completion_start") < 2:
            assert time.monotonic() < deadline, before
            time.sleep(0.02)
        asked_before = len(model.requests)
        first.send_signal(signal.SIGKILL)  # no shutdown, no lifespan: a crash
        first.wait(PATIENCE_S)
        watcher.join(PATIENCE_S)
    assert before and before[-1][1]["kind"] != "run_end"  # the stream was cut mid-run
    second, url = start_service(args)
    services.append(second)
    after: list[tuple[int, dict[str, Any]]] = []
    with httpx.Client(base_url=url, timeout=PATIENCE_S) as client:
        # The last completion alone takes DELAY_MS, after the restart: still going.
        assert client.get(f"/v1/runs/{run['id']}").json()["status"] == "resumed"
        _follow(url, run["id"], before[-1][0], after)
        done = _wait_finished(client, run["id"])
        assert (done["status"], done["outcome"], done["exit_code"]) == ("finished", "exited", 0)
        assert MULTI_TOOL_STDOUT in done["stdout"]
        assert len(model.requests) > asked_before  # it went on live after the replay
        _assert_asked_once_each(model)
        # One run: the ids go on after the last one the client saw, no repeat,
        # no jump back to 0, and the stream says where the resume starts.
        ids = [event_id for event_id, _record in after]
        assert ids and ids[0] > before[-1][0] and ids == sorted(set(ids)), ids
        kinds = [record["kind"] for _id, record in after]
        assert "run_resumed" in kinds and kinds[-1] == "run_end", kinds
        assert after[-1][1]["outcome"] == "exited"
        # The events of the steps replayed are not shown twice: the whole
        # stream has one run_start and one completion_end per completion.
        whole = [record["kind"] for _id, record in sse_events(
            client.get(f"/v1/runs/{run['id']}/events"))]
        assert whole.count("run_start") == 1, whole
        assert whole.count("completion_end") == len(MULTI_TOOL_MESSAGES), whole
        steps = _journal_kinds(client, run)
        assert steps[0] == "start" and steps[-1] == "end"
        assert steps.count("chat.completion") == len(MULTI_TOOL_MESSAGES)


def _processes(server: BackgroundServer) -> ProcessRuns:
    executor = server.app.state.service.runs.executor
    assert isinstance(executor, ProcessRuns)
    return executor


@pytest.fixture
def worker_service(tmp_path: Path, model: ScriptedServer) -> Iterator[BackgroundServer]:
    host = HostConfig(base_url=model.base_url, model="m", api_key_env="", cache_dir=None,
                      timeout=120)
    config = ServeConfig(modules_dir=modules_dir(tmp_path), state_dir=tmp_path / "state",
                         host=host, max_concurrent=2, grace=0.5, executor="processes",
                         workers=2, journal=True, max_resumes=1)
    with BackgroundServer(create_app(config), grace=0.5) as running:
        yield running


def _kill_busy_worker(executor: ProcessRuns, not_pid: int | None = None) -> int:
    deadline = time.monotonic() + PATIENCE_S
    while time.monotonic() < deadline:
        busy = [pid for pid in executor.worker_pids(busy=True) if pid != not_pid]
        if busy:
            os.kill(busy[0], signal.SIGKILL)
            return busy[0]
        time.sleep(0.02)
    raise AssertionError("no worker took the run")


def test_a_killed_workers_run_resumes_on_another_worker_a_bounded_number_of_times(
        worker_service: BackgroundServer, model: ScriptedServer) -> None:
    executor = _processes(worker_service)
    with httpx.Client(base_url=worker_service.url, timeout=PATIENCE_S) as client:
        run = _start_mid_request(client, model)
        killed = _kill_busy_worker(executor)
        done = _wait_finished(client, run["id"])
        assert (done["outcome"], done["exit_code"]) == ("exited", 0), done["message"]
        assert MULTI_TOOL_STDOUT in done["stdout"]
        _assert_asked_once_each(model)
        events = list(sse_events(client.get(f"/v1/runs/{run['id']}/events")))
        ids = [event_id for event_id, _record in events]
        assert ids == sorted(set(ids)), ids
        resumed = [record for _id, record in events if record["kind"] == "run_resumed"]
        assert len(resumed) == 1 and resumed[0]["why"] == "worker_lost", resumed
        assert f"pid {killed}" in resumed[0]["message"] and "SIGKILL" in resumed[0]["message"]
        kinds = [record["kind"] for _id, record in events]
        assert kinds.count("run_start") == 1 and kinds[-1] == "run_end", kinds
        assert kinds.count("completion_end") == len(MULTI_TOOL_MESSAGES), kinds
        assert "\nspearpy_serve_workers_lost 1.0\n" in client.get("/metrics").text
        # max_resumes=1: the second worker to die under a run ends it.
        model.clear_requests()
        run = _start_mid_request(client, model)
        first = _kill_busy_worker(executor)
        # The run goes on in the other worker: kill that one too.
        second = _kill_busy_worker(executor, not_pid=first)
        done = _wait_finished(client, run["id"])
        assert (done["outcome"], done["exit_code"]) == ("worker_lost", 75), done
        assert f"pid {second}" in done["message"] and "resumed 1 times" in done["message"]
