"""A fork whose run stops (its worker died) resumes its own journal
(spearpy/executors/resumes.py), instead of being submitted again as a fork,
which would start the fork's journal a second time and fail.

- `continued_fork` on real journals of a real c_multi_tool run over a
  loopback model that counts its requests: a fork cut short before its fork
  point gets the rest of the forked steps copied, so its resume asks only
  what comes after the fork point; one cut after it goes on as it is; one
  that wrote nothing yet is forked again.
- A fork `spearpy serve` runs (POST /v1/runs/{id}/fork) on a worker process
  SIGKILLed under it while the model holds its first live completion: the
  fork ends `exited` with the original's output, the model is asked each
  completion after the fork point once (the one in flight may be asked
  again), and the fork's journal is whole. Before the fix the fork ended
  `host_error` ("journal ... has started already").
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from spearpy import Host, HostConfig
from spearpy.durable import JournalSpec
from spearpy.executors.base import RunJob
from spearpy.executors.resumes import continued_fork, resumed_job
from spearpy.serve import BackgroundServer, ServeConfig, create_app
from spearpy.serve.procs import ProcessRuns
from spearpy.testing import ScriptedServer
from tests.test_durable_cli import MULTI_SCRIPT, MULTI_TOOL_MESSAGES, _slow, _tool_messages
from tests.test_serve_api import MULTI_TOOL_STDOUT, SAMPLES, modules_dir, sse_events

MULTI = str(SAMPLES / "c_multi_tool.wasm")
PATIENCE_S = 90.0  # generous: several engineers share 2 cores; no assertion is about time


# ---- continued_fork, on journals of real runs -------------------------------------


@pytest.fixture
def model() -> Iterator[ScriptedServer]:
    with ScriptedServer(MULTI_SCRIPT) as server:
        yield server


@pytest.fixture
def host(model: ScriptedServer) -> Iterator[Host]:
    with Host(cache_dir=None, base_url=model.base_url, model="m", api_key_env="") as h:
        yield h


def _completion_steps(path: Path) -> list[int]:
    return [json.loads(line)["seq"] for line in path.read_text().splitlines()
            if json.loads(line)["kind"] == "chat.completion"]


def _original_and_fork(host: Host, tmp_path: Path) -> tuple[Path, int, Path, bytes | None]:
    """A journaled run, and a fork of it at its second completion run to its
    end: (the run's journal, the fork point, the fork's journal, its stdout)."""
    original = tmp_path / "original.jsonl"
    assert host.run(MULTI, journal=JournalSpec(original)).outcome == "exited"
    at = _completion_steps(original)[1]
    whole = tmp_path / "whole-fork.jsonl"
    fork = host.run(MULTI, journal=JournalSpec(original, mode="fork", until=at,
                                               fork_into=JournalSpec(whole)))
    assert fork.outcome == "exited", fork.message
    return original, at, whole, fork.stdout


def _fork_spec(original: Path, at: int, into: Path) -> JournalSpec:
    return JournalSpec(original, mode="fork", until=at, fork_into=JournalSpec(into))


@pytest.mark.parametrize("kept", [1, 2, "at"])
def test_a_fork_cut_before_its_fork_point_gets_the_rest_copied_and_asks_only_after_it(
        host: Host, model: ScriptedServer, tmp_path: Path, kept: int | str) -> None:
    original, at, whole, stdout = _original_and_fork(host, tmp_path)
    lines = whole.read_text().splitlines(keepends=True)
    # What a fork killed while it replayed (or just at its fork point) leaves:
    # its start and the first steps it copied.
    cut = tmp_path / "cut.jsonl"
    count = at + 1 if kept == "at" else 1 + int(kept)
    cut.write_text("".join(lines[:count]))
    cut.chmod(0o600)
    spec = continued_fork(_fork_spec(original, at, cut))
    assert spec == JournalSpec(cut)  # its own journal, in record mode
    # Every step up to the fork point is the forked run's, as the whole fork has them.
    assert cut.read_text().splitlines(keepends=True) == lines[:at + 1]
    asked = len(model.requests)
    resumed = host.run(MULTI, journal=spec)
    assert (resumed.outcome, resumed.stdout) == ("exited", stdout), resumed.message
    # The completions up to the fork point came from the journal, not the model.
    assert _tool_messages(model, asked) == MULTI_TOOL_MESSAGES[2:]
    assert _kinds(whole) == _kinds(cut)  # the live steps hold their own ids and times


def _kinds(path: Path) -> list[str]:
    return [json.loads(line)["kind"] for line in path.read_text().splitlines()]


def test_a_fork_cut_after_its_fork_point_goes_on_with_its_own_steps(
        host: Host, model: ScriptedServer, tmp_path: Path) -> None:
    original, at, whole, stdout = _original_and_fork(host, tmp_path)
    lines = whole.read_text().splitlines(keepends=True)
    cut = tmp_path / "cut.jsonl"
    third = _completion_steps(whole)[2]
    cut.write_text("".join(lines[:third + 1]))  # its first live completion journaled
    spec = continued_fork(_fork_spec(original, at, cut))
    assert spec == JournalSpec(cut)
    assert cut.read_text().splitlines(keepends=True) == lines[:third + 1]  # nothing added
    asked = len(model.requests)
    resumed = host.run(MULTI, journal=spec)
    assert (resumed.outcome, resumed.stdout) == ("exited", stdout), resumed.message
    assert _tool_messages(model, asked) == MULTI_TOOL_MESSAGES[3:]


def test_a_fork_that_wrote_nothing_is_forked_again(host: Host, tmp_path: Path) -> None:
    original, at, _whole, _stdout = _original_and_fork(host, tmp_path)
    absent = tmp_path / "absent.jsonl"
    assert continued_fork(_fork_spec(original, at, absent)) is None
    empty = tmp_path / "empty.jsonl"
    empty.write_bytes(b"")  # created, killed before its start record
    assert continued_fork(_fork_spec(original, at, empty)) is None
    job = RunJob("k", "m", "0" * 64, journal=_fork_spec(original, at, absent))
    assert resumed_job(job) is job
    # A job without a journal, or whose journal is not there yet, goes on as it was.
    for same in (RunJob("k", "m", "0" * 64), RunJob("k", "m", "0" * 64,
                                                   journal=JournalSpec(absent))):
        assert resumed_job(same) is same


def test_a_lost_runs_ended_journal_is_replayed_and_one_without_a_start_is_not_resumed(
        host: Host, model: ScriptedServer, tmp_path: Path) -> None:
    """The run ended on its worker, whose death lost the result on the way:
    its journal gives it back offline. A worker that died creating the
    journal left nothing to resume from."""
    original = tmp_path / "original.jsonl"
    ran = host.run(MULTI, journal=JournalSpec(original))
    assert ran.outcome == "exited"
    job = resumed_job(RunJob("k", "m", "0" * 64, journal=JournalSpec(original)))
    assert isinstance(job, RunJob) and job.journal == JournalSpec(original, mode="replay")
    asked = len(model.requests)
    again = host.run(MULTI, journal=job.journal)
    assert (again.outcome, again.exit_code, again.stdout) == ("exited", 0, ran.stdout)
    assert len(model.requests) == asked
    # A fork that ended is replayed from its own journal.
    (tmp_path / "f").mkdir()
    forked, at, whole, _stdout = _original_and_fork(host, tmp_path / "f")
    fork = resumed_job(RunJob("k", "m", "0" * 64, journal=_fork_spec(forked, at, whole)))
    assert isinstance(fork, RunJob) and fork.journal == JournalSpec(whole, mode="replay")
    empty = tmp_path / "empty.jsonl"
    empty.write_bytes(b"")
    why = resumed_job(RunJob("k", "m", "0" * 64, journal=JournalSpec(empty)))
    assert isinstance(why, str) and "no start record" in why
    # A run that had timed out: a replay would run out of answers, not time.
    lines = original.read_text().splitlines()
    end = {**json.loads(lines[-1]), "outcome": "timeout", "exit_code": 124}
    timed_out = tmp_path / "timed-out.jsonl"
    timed_out.write_text("\n".join([*lines[:-1], json.dumps(end, separators=(",", ":"))])
                         + "\n")
    why = resumed_job(RunJob("k", "m", "0" * 64, journal=JournalSpec(timed_out)))
    assert isinstance(why, str) and "ended timeout (exit code 124)" in why


def test_a_fork_whose_journal_does_not_follow_the_forked_one_is_left_as_it_was(
        host: Host, tmp_path: Path) -> None:
    original, at, whole, _stdout = _original_and_fork(host, tmp_path)
    # Steps missing in the middle of the forked journal: nothing to copy
    # from there. The job stays a fork (its worker then reports the error).
    lines = original.read_text().splitlines(keepends=True)
    broken = tmp_path / "broken.jsonl"
    broken.write_text(lines[0] + "".join(lines[at + 1:]))
    cut = tmp_path / "cut.jsonl"
    cut.write_text("".join(whole.read_text().splitlines(keepends=True)[:2]))
    job = RunJob("k", "m", "0" * 64, journal=_fork_spec(broken, at, cut))
    assert resumed_job(job) is job


# ---- a fork on a killed worker process, through the service ------------------------

DELAY_MS = 600  # each completion takes this long: the fork still waits when its worker dies


@pytest.fixture
def slow_model() -> Iterator[ScriptedServer]:
    with ScriptedServer(_slow(MULTI_SCRIPT, DELAY_MS)) as server:
        yield server


@pytest.fixture
def service(tmp_path: Path, slow_model: ScriptedServer) -> Iterator[BackgroundServer]:
    host = HostConfig(base_url=slow_model.base_url, model="m", api_key_env="", cache_dir=None,
                      timeout=120)
    config = ServeConfig(modules_dir=modules_dir(tmp_path), state_dir=tmp_path / "state",
                         host=host, max_concurrent=2, grace=0.5, executor="processes",
                         workers=2, journal=True)
    with BackgroundServer(create_app(config), grace=0.5) as running:
        yield running


def _finished(client: httpx.Client, run_id: str) -> dict[str, Any]:
    deadline = time.monotonic() + PATIENCE_S
    while time.monotonic() < deadline:
        view: dict[str, Any] = client.get(f"/v1/runs/{run_id}").json()
        if view["status"] == "finished":
            return view
        time.sleep(0.05)
    raise AssertionError(f"run {run_id} did not end")


def _steps(client: httpx.Client, run: dict[str, Any]) -> list[dict[str, Any]]:
    steps: list[dict[str, Any]] = []
    page: str | None = run["urls"]["journal"] + "?limit=5"
    while page is not None:
        answer = client.get(page)
        if answer.status_code == 404:  # not started yet
            return steps
        steps.extend(answer.json()["steps"])
        page = answer.json()["next"]
    return steps


def test_a_fork_whose_worker_process_dies_resumes_its_own_journal(
        service: BackgroundServer, slow_model: ScriptedServer) -> None:
    executor = service.app.state.service.runs.executor
    assert isinstance(executor, ProcessRuns)
    with httpx.Client(base_url=service.url, timeout=PATIENCE_S) as client:
        original = _finished(client, client.post("/v1/runs", json={
            "module": "c_multi_tool"}).json()["id"])
        assert (original["outcome"], original["exit_code"]) == ("exited", 0)
        at = [s["seq"] for s in _steps(client, original) if s["kind"] == "chat.completion"][1]
        asked = len(slow_model.requests)
        fork = client.post(original["urls"]["fork"], json={"at": at}).json()
        # Killed once the fork went live: its first own completion is in flight.
        deadline = time.monotonic() + PATIENCE_S
        while len(slow_model.requests) == asked:
            assert time.monotonic() < deadline, "the fork never asked the model"
            time.sleep(0.02)
        [busy] = executor.worker_pids(busy=True)
        os.kill(busy, signal.SIGKILL)
        done = _finished(client, fork["id"])
        assert (done["outcome"], done["exit_code"]) == ("exited", 0), done["message"]
        assert done["stdout"] == original["stdout"] and MULTI_TOOL_STDOUT in done["stdout"]
        asked_after = _tool_messages(slow_model, asked)
        assert sorted(set(asked_after)) == MULTI_TOOL_MESSAGES[2:], asked_after
        assert len(asked_after) <= len(MULTI_TOOL_MESSAGES[2:]) + 1, asked_after
        events = [record for _id, record in sse_events(
            client.get(f"/v1/runs/{fork['id']}/events"))]
        resumed = [e for e in events if e["kind"] == "run_resumed"]
        assert len(resumed) == 1 and f"pid {busy}" in resumed[0]["message"], resumed
        # Its journal: the forked steps up to `at`, then its own, ended.
        kinds = [s["kind"] for s in _steps(client, fork)]
        assert kinds[0] == "start" and kinds[-1] == "end", kinds
        assert kinds.count("chat.completion") == len(MULTI_TOOL_MESSAGES), kinds
        assert kinds[:at + 1] == [s["kind"] for s in _steps(client, original)][:at + 1]


# ---- a fork cut before its fork point, resumed by a restarted service ---------------


def test_a_restarted_service_resumes_a_fork_cut_short_in_its_replay(
        tmp_path: Path, model: ScriptedServer) -> None:
    host = HostConfig(base_url=model.base_url, model="m", api_key_env="", cache_dir=None,
                      timeout=60)
    config = ServeConfig(modules_dir=modules_dir(tmp_path), state_dir=tmp_path / "state",
                         host=host, grace=0.5, journal=True)
    with BackgroundServer(create_app(config), grace=0.5) as first, \
            httpx.Client(base_url=first.url, timeout=PATIENCE_S) as client:
        original = _finished(client, client.post("/v1/runs", json={
            "module": "c_multi_tool"}).json()["id"])
        at = [s["seq"] for s in _steps(client, original) if s["kind"] == "chat.completion"][1]
        fork = client.post(original["urls"]["fork"], json={"at": at}).json()
        _finished(client, fork["id"])
    # What a service killed while the fork replayed its first steps leaves:
    # the fork in progress, its journal holding its start and one copied step.
    state = tmp_path / "state"
    db = sqlite3.connect(state / "journals.sqlite3")
    with db:
        db.execute("DELETE FROM journal_steps WHERE journal_id=? AND seq>1", (fork["id"],))
        db.execute("UPDATE journals SET ended=0 WHERE id=?", (fork["id"],))
    db.close()
    db = sqlite3.connect(state / "runs.sqlite3")
    with db:
        db.execute("UPDATE runs SET status='running' WHERE id=?", (fork["id"],))
        db.execute("DELETE FROM events WHERE run_id=?", (fork["id"],))
    db.close()
    asked = len(model.requests)
    with BackgroundServer(create_app(config), grace=0.5) as second, \
            httpx.Client(base_url=second.url, timeout=PATIENCE_S) as client:
        done = _finished(client, fork["id"])
        assert (done["outcome"], done["exit_code"]) == ("exited", 0), done["message"]
        assert done["stdout"] == original["stdout"]
        # Up to the fork point from the forked run's journal: only after it asked.
        assert _tool_messages(model, asked) == MULTI_TOOL_MESSAGES[2:]
        kinds = [s["kind"] for s in _steps(client, done)]
        assert kinds[:at + 1] == [s["kind"] for s in _steps(client, original)][:at + 1]
