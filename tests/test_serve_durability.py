"""Runs outlive the process that ran them: a restart lists finished runs with
their events, a crash leaves its runs `interrupted`, and SIGTERM lets runs
finish within --grace before cancelling the rest."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from spearpy import HostConfig
from spearpy.serve import BackgroundServer, ServeConfig, create_app
from spearpy.serve.store import StoreLocked
from tests.test_serve_api import (
    MULTI_TOOL_STDOUT,
    ROOT,
    SAMPLES,
    events_of,
    modules_dir,
    slow_script,
    sse_events,
    wait_for,
)

MULTI_TOOL = f"scripted:{SAMPLES / 'scripts' / 'multi_tool.json'}"


def config(where: Path, mods: Path, grace: float = 0.5) -> ServeConfig:
    return ServeConfig(modules_dir=mods, state_dir=where / "state", grace=grace,
                       host=HostConfig(backend=MULTI_TOOL, cache_dir=None, timeout=30))


def test_a_restart_keeps_finished_runs_and_their_events(tmp_path: Path) -> None:
    mods = modules_dir(tmp_path)
    with BackgroundServer(create_app(config(tmp_path, mods))) as first, \
            httpx.Client(base_url=first.url, timeout=30) as client:
        done = client.post("/v1/runs", json={"module": "c_multi_tool", "wait": True}).json()
        before = events_of(client, done)
        # Still spinning when the service stops: cancelled after the grace.
        spinning = client.post("/v1/runs", json={"module": "c_infinite_loop"}).json()
        with pytest.raises(StoreLocked):  # one service per state directory
            create_app(config(tmp_path, mods))
    with BackgroundServer(create_app(config(tmp_path, mods))) as second, \
            httpx.Client(base_url=second.url, timeout=30) as client:
        runs = {run["id"]: run for run in client.get("/v1/runs").json()["runs"]}
        assert set(runs) == {done["id"], spinning["id"]}
        kept = client.get(done["urls"]["self"]).json()
        assert (kept["status"], kept["outcome"], kept["exit_code"]) == ("finished", "exited", 0)
        assert MULTI_TOOL_STDOUT in kept["stdout"] and kept["transcripts"]
        assert kept["usage"] == done["usage"]
        assert events_of(client, done) == before
        stopped = client.get(spinning["urls"]["self"]).json()
        assert (stopped["outcome"], stopped["exit_code"]) == ("cancelled", 130)
        assert stopped["cancel_reason"] == "shutdown" and "grace" in stopped["message"]
        assert events_of(client, spinning)[-1]["outcome"] == "cancelled"


def start_service(args: list[str]) -> tuple[subprocess.Popen[str], str]:
    """`python -m spearpy.serve ARGS` on a free port; (process, base URL)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get(
        "PYTHONPATH", "")])}
    proc = subprocess.Popen([sys.executable, "-m", "spearpy.serve", "--port", "0",
                             "--no-cache", "--no-access-log", *args],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            env=env, cwd=ROOT)
    assert proc.stderr is not None
    seen = []
    for line in proc.stderr:
        seen.append(line)
        if "listening on " in line:
            url = line.split("listening on ")[1].strip().rstrip("/")
            # Keep draining stderr so the service never blocks on a full pipe.
            threading.Thread(target=proc.stderr.read, daemon=True).start()
            return proc, url
    raise AssertionError(f"the service did not start: {''.join(seen)}")


@pytest.fixture
def processes() -> Iterator[list[subprocess.Popen[str]]]:
    started: list[subprocess.Popen[str]] = []
    yield started
    for proc in started:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_runs_in_flight_at_a_crash_are_marked_interrupted(
        tmp_path: Path, processes: list[subprocess.Popen[str]]) -> None:
    mods = modules_dir(tmp_path)
    proc, url = start_service(["--modules", str(mods), "--state-dir", str(tmp_path / "state"),
                               "--backend", MULTI_TOOL])
    processes.append(proc)
    with httpx.Client(base_url=url, timeout=30) as client:
        run = client.post("/v1/runs", json={"module": "c_infinite_loop"}).json()
        with client.stream("GET", run["urls"]["events"]) as response:
            assert next(sse_events(response))[1]["kind"] == "run_start"
        proc.kill()  # no shutdown, no lifespan: as a crash or the OOM killer
        proc.wait()
    with BackgroundServer(create_app(config(tmp_path, mods))) as again, \
            httpx.Client(base_url=again.url, timeout=30) as client:
        lost = client.get(run["urls"]["self"]).json()
        assert (lost["status"], lost["outcome"], lost["exit_code"]) == \
            ("interrupted", "interrupted", None)
        assert "stopped while the run was in progress" in lost["message"]
        events = events_of(client, run)
        assert [e["kind"] for e in events] == ["run_start", "run_end"]
        assert events[-1]["outcome"] == "interrupted"
        assert [r["id"] for r in client.get("/v1/runs", params={
            "status": "interrupted"}).json()["runs"]] == [run["id"]]


def test_sigterm_lets_runs_finish_within_the_grace_then_cancels(
        tmp_path: Path, processes: list[subprocess.Popen[str]]) -> None:
    mods = modules_dir(tmp_path)
    script = tmp_path / "slow_chat.json"
    script.write_text(json.dumps({"default": {"content": "slow but in time",
                                              "delay_ms": 800}}))
    grace = 2.5
    proc, url = start_service(["--modules", str(mods), "--state-dir", str(tmp_path / "state"),
                               "--backend", f"scripted:{script}", "--grace", str(grace)])
    processes.append(proc)
    with httpx.Client(base_url=url, timeout=30) as client:
        spinning = client.post("/v1/runs", json={"module": "c_infinite_loop"}).json()
        slow = client.post("/v1/runs", json={"module": "c_chat"}).json()
        streamed: list[dict[str, Any]] = []

        def watch() -> None:
            with httpx.Client(base_url=url, timeout=30) as watcher:
                streamed.extend(events_of(watcher, spinning))

        watcher = threading.Thread(target=watch)
        watcher.start()
        time.sleep(0.3)
        signalled = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        time.sleep(0.5)
        with pytest.raises(httpx.TransportError):  # no longer accepting
            client.post("/v1/runs", json={"module": "c_hello"})
        assert proc.wait(timeout=grace + 20) == 0
        took = time.monotonic() - signalled
        watcher.join(10)
    assert grace <= took < grace + 10
    # The open event stream got the cancelled run's end before the service went.
    assert streamed[-1]["kind"] == "run_end" and streamed[-1]["outcome"] == "cancelled"
    with BackgroundServer(create_app(config(tmp_path, mods))) as again, \
            httpx.Client(base_url=again.url, timeout=30) as client:
        finished = wait_for(client, slow["id"])
        assert (finished["outcome"], finished["exit_code"]) == ("exited", 0)
        assert "slow but in time" in finished["stdout"]
        cancelled = client.get(spinning["urls"]["self"]).json()
        assert (cancelled["outcome"], cancelled["exit_code"]) == ("cancelled", 130)
        assert f"{grace:g} s grace" in cancelled["message"]


def refuse_inserts(where: Path, table: str) -> sqlite3.Connection:
    """Make the service's database refuse every insert into `table` (a real
    SQLite error, raised by a trigger, where a full disk would raise
    SQLITE_FULL); the connection can drop the trigger again."""
    db = sqlite3.connect(where / "state" / "runs.sqlite3")
    db.execute(f"CREATE TRIGGER refuse BEFORE INSERT ON {table} "
               "BEGIN SELECT RAISE(ABORT, 'the disk is full'); END")
    db.commit()
    return db


def test_a_store_that_refuses_writes_leaves_no_client_waiting(tmp_path: Path) -> None:
    # The disk refuses every event and the run's end: the waiting request
    # still answers, the live stream still ends with the run.
    mods = modules_dir(tmp_path)
    slow = ServeConfig(modules_dir=mods, state_dir=tmp_path / "state", grace=0.5,
                       host=HostConfig(backend=f"scripted:{slow_script(tmp_path, 300)}",
                                       cache_dir=None, timeout=30))
    with BackgroundServer(create_app(slow)) as server, \
            httpx.Client(base_url=server.url, timeout=60) as client:
        refuse_inserts(tmp_path, "events").close()
        watching: list[dict[str, Any]] = []
        started = client.post("/v1/runs", json={"module": "c_multi_tool"}).json()

        def watch() -> None:
            with client.stream("GET", started["urls"]["events"]) as response:
                watching.extend(record for _id, record in sse_events(response))

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        # Subscribed while the run is live (four completions of 300 ms each):
        # what it hears then comes from memory, not from the refusing disk.
        deadline = time.monotonic() + 30
        while "\nspearpy_serve_event_subscribers 1.0\n" not in client.get("/metrics").text:
            assert time.monotonic() < deadline, "the watcher never subscribed"
            time.sleep(0.02)
        waited = client.post("/v1/runs", json={"module": "c_multi_tool", "wait": True})
        assert waited.status_code == 201, waited.text
        assert waited.json()["outcome"] == "exited" and MULTI_TOOL_STDOUT in waited.json()["stdout"]
        watcher.join(60)
        assert not watcher.is_alive(), "the event stream never ended"
        assert watching[-1]["kind"] == "run_end" and watching[-1]["outcome"] == "exited"
        assert any(record["kind"] == "tool_end" for record in watching)


def test_a_run_whose_end_the_disk_refused_still_reads_as_finished(tmp_path: Path) -> None:
    # The live service knows the run ended although its end is not on disk:
    # a client polling the run, a late subscriber and the run list see it
    # finished; once the disk takes writes again the end is written.
    mods = modules_dir(tmp_path)
    with BackgroundServer(create_app(config(tmp_path, mods))) as server, \
            httpx.Client(base_url=server.url, timeout=60) as client:
        db = refuse_inserts(tmp_path, "events")
        started = client.post("/v1/runs", json={"module": "c_multi_tool"}).json()
        run = wait_for(client, started["id"], timeout=60)
        assert (run["status"], run["outcome"], run["exit_code"]) == ("finished", "exited", 0)
        assert MULTI_TOOL_STDOUT in run["stdout"]
        listed = client.get("/v1/runs").json()["runs"]
        assert [r["status"] for r in listed if r["id"] == started["id"]] == ["finished"]
        finished = client.get("/v1/runs?status=finished").json()["runs"]
        assert [r["id"] for r in finished] == [started["id"]]
        assert client.get("/v1/runs?status=running").json()["runs"] == []
        late = events_of(client, started)
        assert late and late[-1]["kind"] == "run_end" and late[-1]["outcome"] == "exited"
        cancel = client.delete(f"/v1/runs/{started['id']}")
        assert cancel.status_code == 409 and cancel.json()["outcome"] == "exited"
        on_disk = sqlite3.connect(tmp_path / "state" / "runs.sqlite3")
        stored = "SELECT status FROM runs WHERE id=?"
        assert on_disk.execute(stored, (started["id"],)).fetchone() == ("running",)
        db.execute("DROP TRIGGER refuse")
        db.commit()
        db.close()
        deadline = time.monotonic() + 30
        while on_disk.execute(stored, (started["id"],)).fetchone() != ("finished",):
            assert time.monotonic() < deadline, "the refused end was never written again"
            time.sleep(0.1)
        on_disk.close()
    with BackgroundServer(create_app(config(tmp_path, mods))) as server, \
            httpx.Client(base_url=server.url, timeout=60) as client:
        again = client.get(f"/v1/runs/{started['id']}").json()
        assert (again["status"], again["outcome"]) == ("finished", "exited")
        assert events_of(client, started)[-1]["kind"] == "run_end"


def test_a_run_whose_record_is_refused_is_cancelled_and_answered_503(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    mods = modules_dir(tmp_path)
    with BackgroundServer(create_app(config(tmp_path, mods))) as server, \
            httpx.Client(base_url=server.url, timeout=60) as client:
        db = refuse_inserts(tmp_path, "runs")
        refused = client.post("/v1/runs", json={"module": "c_infinite_loop"})
        assert refused.status_code == 503, refused.text
        assert refused.json()["type"] == "urn:spearpy:problem:store-failed"
        assert "the disk is full" in refused.json()["detail"]
        # The spinning guest was cancelled (nobody holds its id) and gave its slot back.
        deadline = time.monotonic() + 60
        while "\nspearpy_serve_runs_active 0.0\n" not in client.get("/metrics").text:
            assert time.monotonic() < deadline, "the refused run was never cancelled"
            time.sleep(0.05)
        db.execute("DROP TRIGGER refuse")
        db.commit()
        db.close()
        done = client.post("/v1/runs", json={"module": "c_multi_tool", "wait": True})
        assert done.status_code == 201 and done.json()["outcome"] == "exited"
    assert not [r for r in caplog.records if "released too many times" in r.getMessage()
                or (r.exc_info and "released too many times" in str(r.exc_info[1]))]

