"""`spearpy serve --executor processes` and `--ray`: runs execute in worker
processes / on Ray actors, and their events still reach a client live;
cancel reaches the run; a killed worker ends its run as `worker_lost` and
the service goes on. Real uvicorn on 127.0.0.1, real sample guests, the
scripted model."""

from __future__ import annotations

import importlib.util
import os
import shutil
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from spearpy import Host, HostConfig
from spearpy.serve import BackgroundServer, ServeConfig, create_app
from spearpy.serve.auto import AutoRuns, needs_service_process
from spearpy.serve.procs import ProcessRuns
from spearpy.serve.store import RunStore
from tests import test_batch_ray as _batch_ray_tests
from tests import test_serve_api as _api_tests
from tests.test_serve_api import (
    CHAT_BACKEND,
    MULTI_TOOL_STDOUT,
    SAMPLES,
    assert_problem,
    modules_dir,
    slow_script,
    sse_events,
    wait_for,
)
from tests.test_serve_durability import start_service

# Fixtures shared with the modules that define them: the API tests' client
# (of this module's server), and test_batch_ray's local Ray cluster.
client = _api_tests.client
cluster = _batch_ray_tests.cluster

KEY = "sk-serve-executors-" + "k" * 24


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BackgroundServer]:
    where = tmp_path_factory.mktemp("serve-procs")
    host = HostConfig(backend=f"scripted:{slow_script(where, 150)}", cache_dir=None,
                      timeout=30)
    config = ServeConfig(modules_dir=modules_dir(where), state_dir=where / "state", host=host,
                         max_concurrent=4, grace=0.5, executor="processes", workers=2,
                         allow_backends=(CHAT_BACKEND,))
    with pytest.MonkeyPatch.context() as env:
        env.setenv("OPENAI_API_KEY", KEY)  # inherited by the workers: must show nowhere
        with BackgroundServer(create_app(config), grace=0.5) as running:
            yield running


def _executor(server: BackgroundServer) -> ProcessRuns:
    executor = server.app.state.service.runs.executor
    assert isinstance(executor, ProcessRuns)
    return executor


def test_a_run_executes_in_a_worker_process(server: BackgroundServer,
                                            client: httpx.Client) -> None:
    pids = _executor(server).worker_pids()
    assert len(pids) == 2 and os.getpid() not in pids
    reply = client.post("/v1/runs", json={"module": "c_multi_tool", "wait": True})
    assert reply.status_code == 201, reply.text
    run = reply.json()
    assert (run["outcome"], run["exit_code"]) == ("exited", 0)
    assert MULTI_TOOL_STDOUT in run["stdout"]
    assert run["usage"]["total_tokens"] > 0
    kinds = [record["kind"] for _seq, record in
             sse_events(client.get(f"/v1/runs/{run['id']}/events"))]
    assert kinds[0] == "run_start" and kinds[-1] == "run_end"
    assert {"tool_start", "tool_end", "completion_end"} <= set(kinds)
    # A model override builds that Host in the worker too.
    other = client.post("/v1/runs", json={"module": "c_chat", "backend": CHAT_BACKEND,
                                          "wait": True}).json()
    assert other["outcome"] == "exited", other
    assert KEY not in reply.text + other["stdout"] + other["stderr"]


def kinds_and_status(client: httpx.Client, run_id: str) -> list[tuple[str, str]]:
    """Each event's kind as it arrives, with the run's status read right then."""
    seen: list[tuple[str, str]] = []
    with client.stream("GET", f"/v1/runs/{run_id}/events") as events:
        for _seq, record in sse_events(events):
            seen.append((record["kind"], client.get(f"/v1/runs/{run_id}").json()["status"]))
            if record["kind"] == "run_end":
                break
    return seen


def test_events_arrive_while_the_run_is_in_a_worker(client: httpx.Client) -> None:
    run = client.post("/v1/runs", json={"module": "c_multi_tool"}).json()
    seen = kinds_and_status(client, run["id"])
    # Tool events came while the run was still running: live, not a replay.
    assert ("tool_end", "running") in seen, seen
    assert seen[-1][0] == "run_end"
    assert wait_for(client, run["id"])["outcome"] == "exited"


def test_delete_cancels_a_run_in_a_worker(client: httpx.Client) -> None:
    run = client.post("/v1/runs", json={"module": "c_infinite_loop"}).json()
    with client.stream("GET", f"/v1/runs/{run['id']}/events") as events:
        first = next(sse_events(events))[1]
        assert first["kind"] == "run_start"  # it is running in the worker now
        assert client.delete(f"/v1/runs/{run['id']}").status_code == 202
    ended = wait_for(client, run["id"], timeout=20)
    assert (ended["outcome"], ended["cancel_reason"]) == ("cancelled", "request")
    assert ended["message"] == f"cancelled by DELETE /v1/runs/{run['id']}"


def test_a_killed_worker_ends_its_run_and_is_replaced(server: BackgroundServer,
                                                      client: httpx.Client) -> None:
    executor = _executor(server)
    before = set(executor.worker_pids())
    run = client.post("/v1/runs", json={"module": "c_infinite_loop"}).json()
    with client.stream("GET", f"/v1/runs/{run['id']}/events") as events:
        stream = sse_events(events)
        assert next(stream)[1]["kind"] == "run_start"
        # The run's own pid is not in its events: kill the worker holding a run.
        busy = executor.worker_pids(busy=True)
        assert len(busy) == 1, busy
        os.kill(busy[0], signal.SIGKILL)
        records = [record for _seq, record in stream]
    assert records[-1]["kind"] == "run_end" and records[-1]["outcome"] == "worker_lost"
    ended = wait_for(client, run["id"])
    assert ended["outcome"] == "worker_lost" and ended["exit_code"] == 75
    assert f"pid {busy[0]}" in ended["message"] and "SIGKILL" in ended["message"]
    # A new worker takes its place and the service still runs guests.
    deadline = time.monotonic() + 30
    while len(executor.worker_pids()) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    after = set(executor.worker_pids())
    assert len(after) == 2 and busy[0] not in after and after != before
    again = client.post("/v1/runs", json={"module": "c_hello", "wait": True}).json()
    assert again["outcome"] == "exited", again
    assert "\nspearpy_serve_workers_lost 1.0\n" in client.get("/metrics").text


def test_user_streams_say_they_need_threads(client: httpx.Client) -> None:
    run = client.post("/v1/runs", json={"module": "c_infinite_loop"}).json()
    try:
        reply = client.post(f"/api/v1/executions/{run['id']}/streams/session", json={})
        assert "--executor threads" in assert_problem(reply, 409, "streams-unavailable")["detail"]
    finally:
        client.delete(f"/v1/runs/{run['id']}")
    wait_for(client, run["id"])


def test_shutdown_cancels_runs_in_workers(tmp_path: Path) -> None:
    config = ServeConfig(modules_dir=modules_dir(tmp_path), state_dir=tmp_path / "state",
                         host=HostConfig(backend=CHAT_BACKEND, cache_dir=None),
                         max_concurrent=2, grace=0.2, executor="processes", workers=1)
    server = BackgroundServer(create_app(config), grace=0.2).start()
    pids = _executor(server).worker_pids()
    with httpx.Client(base_url=server.url, timeout=30) as client:
        run = client.post("/v1/runs", json={"module": "c_infinite_loop"}).json()
        with client.stream("GET", f"/v1/runs/{run['id']}/events") as events:
            stream = sse_events(events)
            assert next(stream)[1]["kind"] == "run_start"
            stopper = threading.Thread(target=server.stop)
            stopper.start()
            last = [record for _seq, record in stream][-1]
            stopper.join(60)
    assert not stopper.is_alive()
    assert (last["kind"], last["outcome"]) == ("run_end", "cancelled")
    for pid in pids:  # the workers are gone with the service
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


# uvicorn ends its thread with SystemExit when the startup fails.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_a_worker_that_cannot_start_fails_the_service_start(tmp_path: Path) -> None:
    script = slow_script(tmp_path, 0)
    config = ServeConfig(modules_dir=modules_dir(tmp_path), state_dir=tmp_path / "state",
                         host=HostConfig(backend=f"scripted:{script}", cache_dir=None),
                         executor="processes", workers=1)
    app = create_app(config)  # the service's own Host read the script
    script.unlink()  # a worker's Host cannot
    server = BackgroundServer(app, grace=0.2)
    with pytest.raises(RuntimeError, match="did not start"):
        server.start(timeout=60)
    server.stop()
    assert app.state.service.ready is False
    RunStore(tmp_path / "state").close()  # the failed start let go of the state directory


# ---- auto (the CLI's default) ----------------------------------------------

def _auto_service(where: Path, script: Path) -> tuple[Any, BackgroundServer]:
    mods = modules_dir(where)
    shutil.copy(SAMPLES / "c_user_stream_echo.wasm", mods / "c_user_stream_echo.wasm")
    config = ServeConfig(modules_dir=mods, state_dir=where / "state",
                         host=HostConfig(backend=f"scripted:{script}", cache_dir=None),
                         max_concurrent=4, grace=0.2, executor="auto", workers=1)
    app = create_app(config)
    return app, BackgroundServer(app, grace=0.2)


def test_auto_sends_runs_to_workers_and_stream_runs_to_threads(tmp_path: Path) -> None:
    app, server = _auto_service(tmp_path, slow_script(tmp_path, 0))
    with server, httpx.Client(base_url=server.url, timeout=60) as client:
        executor = app.state.service.runs.executor
        assert isinstance(executor, AutoRuns)
        deadline = time.monotonic() + 60
        while not executor.processes.ready():
            assert time.monotonic() < deadline, "the worker never got ready"
            time.sleep(0.05)
        plain = client.post("/v1/runs", json={"module": "c_multi_tool", "wait": True}).json()
        assert (plain["outcome"], plain["executor"]) == ("exited", "processes"), plain
        assert MULTI_TOOL_STDOUT in plain["stdout"]
        # A module importing user_stream_* needs the hub beside the routes.
        streaming = client.post("/v1/runs", json={"module": "c_user_stream_echo"}).json()
        try:
            assert streaming["executor"] == "threads", streaming
            session = client.post(f"/api/v1/executions/{streaming['id']}/streams/session",
                                  json={})
            assert session.status_code == 200 and session.json()["token"], session.text
        finally:
            client.delete(f"/v1/runs/{streaming['id']}")
        wait_for(client, streaming["id"])
        # The record keeps where the run went, and the metrics count both.
        assert client.get(f"/v1/runs/{plain['id']}").json()["executor"] == "processes"
        metrics = client.get("/metrics").text
        assert 'spearpy_serve_runs_started_total{executor="processes"} 1.0' in metrics
        assert 'spearpy_serve_runs_started_total{executor="threads"} 1.0' in metrics


def test_auto_keeps_serving_on_threads_when_workers_cannot_start(tmp_path: Path) -> None:
    script = slow_script(tmp_path, 0)
    app, server = _auto_service(tmp_path, script)  # the service's own Host read the script
    script.unlink()  # a worker's Host cannot: the workers fail to start
    with server, httpx.Client(base_url=server.url, timeout=60) as client:
        executor = app.state.service.runs.executor
        assert isinstance(executor, AutoRuns)
        for _ in range(3):
            run = client.post("/v1/runs", json={"module": "c_multi_tool", "wait": True}).json()
            assert (run["outcome"], run["executor"]) == ("exited", "threads"), run
        assert not executor.processes.ready()


def test_auto_places_modules_by_their_imports(tmp_path: Path) -> None:
    with Host(cache_dir=None) as host:
        assert needs_service_process(host.load(SAMPLES / "c_user_stream_echo.wasm"))
        assert needs_service_process(host.load(SAMPLES / "c_mic_read.wasm"))
        assert not needs_service_process(host.load(SAMPLES / "c_multi_tool.wasm"))


# ---- Ray -------------------------------------------------------------------

@pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason="needs the [ray] extra")
def test_a_run_on_ray_streams_its_events(cluster: str, tmp_path: Path) -> None:
    # `spearpy serve --ray` in a process of its own: a Ray driver keeps its
    # cluster's credentials for the life of the process (test_batch_ray.py's
    # cluster, in this one, has others).
    proc, url = start_service([
        "--modules", str(modules_dir(tmp_path)), "--state-dir", str(tmp_path / "state"),
        "--backend", f"scripted:{slow_script(tmp_path, 150)}", "--timeout", "60",
        "--max-concurrent", "2", "--grace", "0.5", "--ray", cluster, "--workers", "1"])
    try:
        with httpx.Client(base_url=url, timeout=60) as client:
            run = client.post("/v1/runs", json={"module": "c_multi_tool"}).json()
            seen = kinds_and_status(client, run["id"])
            assert ("tool_end", "running") in seen, seen  # live, while it ran on Ray
            ended: dict[str, Any] = wait_for(client, run["id"], timeout=60)
            assert (ended["outcome"], ended["exit_code"]) == ("exited", 0), ended
            assert MULTI_TOOL_STDOUT in ended["stdout"]
            assert ended["usage"]["total_tokens"] > 0
            # Cancel reaches a run on an actor.
            loop = client.post("/v1/runs", json={"module": "c_infinite_loop"}).json()
            with client.stream("GET", f"/v1/runs/{loop['id']}/events") as events:
                assert next(sse_events(events))[1]["kind"] == "run_start"
                assert client.delete(f"/v1/runs/{loop['id']}").status_code == 202
            assert wait_for(client, loop["id"], timeout=60)["outcome"] == "cancelled"
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0
