"""Replay and fork of a journaled run through `spearpy serve`'s API (issue 31,
docs/serve.md "Replay and fork"): a real service on 127.0.0.1 (uvicorn in
this process) over a loopback OpenAI-protocol model that counts what it is
asked (ScriptedServer).

A replay of a finished run prints the same output with no request upstream,
and stops early with `until`; a fork at step N asks upstream only for what
comes after N, with the model it was given, into a journal of its own; a
replay gives the guest the run's own env values (kept with its record),
never the service's environment; bad requests are 4xx problems.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from spearpy import HostConfig
from spearpy.serve import BackgroundServer, ServeConfig, create_app
from spearpy.testing import ScriptedServer
from tests.probe import wat_module
from tests.test_durable_cli import MULTI_SCRIPT, MULTI_TOOL_MESSAGES, _tool_messages
from tests.test_serve_api import MULTI_TOOL_STDOUT, assert_problem, modules_dir

ALT_MODEL = "alt-model"
# The WASI test guest with env_dump as its _start: it prints its environment block.
ENV_DUMP = wat_module("wasi.wat", {'(func (export "_start")': '(func (export "argc")',
                                   '(func (export "env_dump")': '(func (export "_start")'})
# A variable the service's own environment holds: a replay must not hand it on.
SERVICE_VAR = "SPEARPY_REPLAY_TEST_VAR"
SERVICE_SECRET = "service-own-value-7f3a9c"
PATIENCE_S = 60.0  # generous: 8 engineers share 2 cores


@pytest.fixture(scope="module")
def model() -> Iterator[ScriptedServer]:
    with ScriptedServer(MULTI_SCRIPT) as server:
        yield server


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory, model: ScriptedServer
            ) -> Iterator[tuple[BackgroundServer, Path]]:
    where = tmp_path_factory.mktemp("serve-replay")
    mods = modules_dir(where)
    (mods / "env_dump.wasm").write_bytes(ENV_DUMP)
    host = HostConfig(base_url=model.base_url, model="m", api_key_env="", cache_dir=None,
                      timeout=60)
    config = ServeConfig(modules_dir=mods, state_dir=where / "state", host=host, grace=0.5,
                         journal=True, allow_models=(ALT_MODEL,))
    with BackgroundServer(create_app(config), grace=0.5) as running:
        yield running, mods


@pytest.fixture
def client(service: tuple[BackgroundServer, Path]) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=service[0].url, timeout=PATIENCE_S) as c:
        yield c


def _finished(client: httpx.Client, answer: httpx.Response) -> dict[str, Any]:
    """The run `answer` started, once it has ended."""
    assert answer.status_code == 201, answer.text
    run_id = answer.json()["id"]
    deadline = time.monotonic() + PATIENCE_S
    while time.monotonic() < deadline:
        view: dict[str, Any] = client.get(f"/v1/runs/{run_id}").json()
        if view["status"] == "finished":
            return view
        time.sleep(0.05)
    raise AssertionError(f"run {run_id} did not end")


def _steps(client: httpx.Client, run: dict[str, Any]) -> list[dict[str, Any]]:
    steps: list[dict[str, Any]] = []
    page: str | None = run["urls"]["journal"] + "?limit=4"
    while page is not None:
        answer = client.get(page)
        assert answer.status_code == 200, answer.text
        steps.extend(answer.json()["steps"])
        page = answer.json()["next"]
    return steps


@pytest.fixture(scope="module")
def original(service: tuple[BackgroundServer, Path], model: ScriptedServer
             ) -> dict[str, Any]:
    """A finished journaled c_multi_tool run (four completions asked)."""
    with httpx.Client(base_url=service[0].url, timeout=PATIENCE_S) as client:
        run = _finished(client, client.post("/v1/runs", json={"module": "c_multi_tool"}))
    assert (run["outcome"], run["exit_code"]) == ("exited", 0)
    assert MULTI_TOOL_STDOUT in run["stdout"]
    return run


def test_a_replay_prints_the_same_output_without_asking_the_model(
        client: httpx.Client, model: ScriptedServer, original: dict[str, Any]) -> None:
    asked = len(model.requests)
    started = client.post(original["urls"]["replay"], json={})
    assert started.json()["origin"] == {"run": original["id"], "mode": "replay", "step": None}
    replay = _finished(client, started)
    assert replay["id"] != original["id"]
    assert (replay["outcome"], replay["exit_code"]) == ("exited", 0), replay["message"]
    assert replay["stdout"] == original["stdout"]
    assert replay["usage"] == original["usage"]  # the journal's completions, usage and all
    assert len(model.requests) == asked  # offline: nothing went upstream
    # A replay writes no journal of its own.
    assert "journal" not in replay["urls"] and "replay" not in replay["urls"]
    assert_problem(client.post(f"/v1/runs/{replay['id']}/replay", json={}), 409, "no-journal")


def test_until_stops_the_replay_before_that_step(
        client: httpx.Client, model: ScriptedServer, original: dict[str, Any]) -> None:
    steps = _steps(client, original)
    second = [s["seq"] for s in steps if s["kind"] == "chat.completion"][1]
    asked = len(model.requests)
    replay = _finished(client, client.post(original["urls"]["replay"],
                                           json={"until": second, "wait": True}))
    assert replay["outcome"] == "cancelled", replay
    assert f"before step {second}" in replay["message"]
    assert MULTI_TOOL_STDOUT not in replay["stdout"]
    assert len(model.requests) == asked


def test_a_fork_asks_upstream_only_after_its_step_with_the_new_model(
        client: httpx.Client, model: ScriptedServer, original: dict[str, Any]) -> None:
    steps = _steps(client, original)
    at = [s["seq"] for s in steps if s["kind"] == "chat.completion"][1]
    # What a fork may pick, for the page to offer.
    assert client.get(original["urls"]["journal"]).json()["fork"] == \
        {"models": [ALT_MODEL], "backends": []}
    asked = len(model.requests)
    fork = _finished(client, client.post(original["urls"]["fork"],
                                         json={"at": at, "model": ALT_MODEL}))
    assert (fork["outcome"], fork["exit_code"]) == ("exited", 0), fork["message"]
    assert fork["stdout"] == original["stdout"]
    assert fork["model"] == ALT_MODEL
    assert fork["origin"] == {"run": original["id"], "mode": "fork", "step": at}
    # The first two completions came from the journal; the last two were asked, as alt-model.
    new = model.requests[asked:]
    assert _tool_messages(model, asked) == MULTI_TOOL_MESSAGES[2:]
    assert {r.body["model"] for r in new if r.body is not None} == {ALT_MODEL}
    # Its own journal: step 0, the steps it was answered from, then its own.
    kinds = [s["kind"] for s in _steps(client, fork)]
    assert kinds[0] == "start" and kinds[-1] == "end"
    assert kinds.count("chat.completion") == len(MULTI_TOOL_MESSAGES)
    # ... which a replay serves whole, offline.
    asked = len(model.requests)
    again = _finished(client, client.post(fork["urls"]["replay"], json={}))
    assert again["stdout"] == original["stdout"] and len(model.requests) == asked


def test_a_replay_gives_the_guest_the_runs_env_values_not_the_services(
        client: httpx.Client, original: dict[str, Any], monkeypatch: pytest.MonkeyPatch
        ) -> None:
    # The attack: the journal holds env NAMES only; were a replay to pass them
    # through from the service's environment, a caller naming a variable the
    # service has would read its value in the replay's output.
    monkeypatch.setenv(SERVICE_VAR, SERVICE_SECRET)
    run = _finished(client, client.post("/v1/runs", json={
        "module": "env_dump", "env": {SERVICE_VAR: "the-runs-own"}}))
    assert f"{SERVICE_VAR}=the-runs-own" in run["stdout"].split("\0")
    replay = _finished(client, client.post(run["urls"]["replay"], json={}))
    assert (replay["outcome"], replay["exit_code"]) == ("exited", 0), replay["message"]
    assert replay["stdout"] == run["stdout"]
    assert SERVICE_SECRET not in replay["stdout"]


def test_a_run_whose_inputs_were_not_kept_replays_only_when_its_journal_holds_them(
        client: httpx.Client, service: tuple[BackgroundServer, Path],
        original: dict[str, Any]) -> None:
    """A run that ended before the service kept inputs past a run's end:
    its journal has stdin (small, no secret) but only env names."""
    with_env = _finished(client, client.post("/v1/runs", json={
        "module": "env_dump", "env": {"A_VAR": "a"}}))
    state = service[0].app.state.service.config.state_path
    with sqlite3.connect(state / "runs.sqlite3", timeout=30) as db:
        db.execute("DELETE FROM resume_inputs WHERE run_id IN (?, ?)",
                   (with_env["id"], original["id"]))
    assert_problem(client.post(with_env["urls"]["replay"], json={}), 409, "inputs-not-kept")
    replay = _finished(client, client.post(original["urls"]["replay"], json={}))
    assert replay["stdout"] == original["stdout"]


def test_bad_replays_and_forks_are_problems(client: httpx.Client, model: ScriptedServer,
                                           original: dict[str, Any]) -> None:
    asked = len(model.requests)
    last = _steps(client, original)[-2]["seq"]  # the last step before the end
    replay, fork = original["urls"]["replay"], original["urls"]["fork"]
    assert_problem(client.post("/v1/runs/0123456789abcdef/replay", json={}), 404,
                   "unknown-run")
    assert_problem(client.post("/v1/runs/0123456789abcdef/fork", json={"at": 1}), 404,
                   "unknown-run")
    for body in ({"until": last + 2}, {"until": 10**6}):
        assert_problem(client.post(replay, json=body), 422, "step-out-of-range")
    assert_problem(client.post(fork, json={"at": last + 1}), 422, "step-out-of-range")
    for body in ({"until": 0}, {"until": "3"}, {"surprise": 1}):
        assert_problem(client.post(replay, json=body), 422, "invalid-request")
    for body in ({}, {"at": -1}, {"at": 1, "env": {"X": "y"}}):
        assert_problem(client.post(fork, json=body), 422, "invalid-request")
    assert_problem(client.post(fork, json={"at": 1, "model": "gpt-unlisted"}), 422,
                   "override-not-allowed")
    assert_problem(client.post(fork, json={"at": 1, "backend": "openai"}), 422,
                   "override-not-allowed")
    assert_problem(client.post(fork, json={"at": 1, "limits": {"timeout": 10**4}}), 422,
                   "limit-exceeded")
    assert_problem(client.post(replay, content=b"{}", headers={"Content-Type": "text/plain"}),
                   415)
    assert_problem(client.post(replay, content=b"{not json",
                               headers={"Content-Type": "application/json"}), 400,
                   "invalid-json")
    assert len(model.requests) == asked  # nothing refused reached the model


def test_a_changed_module_is_refused(tmp_path: Path, model: ScriptedServer) -> None:
    mods = modules_dir(tmp_path)
    host = HostConfig(base_url=model.base_url, model="m", api_key_env="", cache_dir=None,
                      timeout=60)
    config = ServeConfig(modules_dir=mods, state_dir=tmp_path / "state", host=host, grace=0.5,
                         journal=True)
    with BackgroundServer(create_app(config), grace=0.5) as running, \
            httpx.Client(base_url=running.url, timeout=PATIENCE_S) as client:
        run = _finished(client, client.post("/v1/runs", json={"module": "c_hello"}))
        (mods / "c_hello.wasm").write_bytes((mods / "c_chat.wasm").read_bytes())
        time.sleep(1.1)  # past RecentModules' 1 s: the next request reads the file again
        assert_problem(client.post(run["urls"]["replay"], json={}), 409, "module-changed")
        assert_problem(client.post(run["urls"]["fork"], json={"at": 0}), 409,
                       "module-changed")
        assert client.get("/readyz").json()["active_runs"] == 0  # no slot left taken


def test_the_openapi_document_has_replay_and_fork(client: httpx.Client) -> None:
    paths = client.get("/v1/openapi.json").json()["paths"]
    for route, schema in (("replay", "ReplayRequest"), ("fork", "ForkRequest")):
        body = paths[f"/v1/runs/{{run_id}}/{route}"]["post"]["requestBody"]
        assert body["content"]["application/json"]["schema"]["$ref"].endswith(schema)
