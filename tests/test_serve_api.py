"""`spearpy serve`'s API through a real uvicorn on 127.0.0.1, driven with httpx."""

from __future__ import annotations

import json
import re
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from spearpy import Host, HostConfig
from spearpy.observe.jsonl import event_record
from spearpy.serve import BackgroundServer, ServeConfig, create_app

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "wasm-samples"
MULTI_TOOL_STDOUT = 'answer: (2 + 3) * 4 = 20, and {"text":"DONE"}'


def modules_dir(where: Path) -> Path:
    """A modules directory: sample guests, a file that is not wasm, a broken
    module, a symlink out of the directory and one inside it."""
    mods = where / "modules"
    mods.mkdir()
    for name in ("c_multi_tool", "c_infinite_loop", "c_hello", "c_chat"):
        shutil.copy(SAMPLES / f"{name}.wasm", mods / f"{name}.wasm")
    (mods / "broken.wasm").write_bytes(b"\0asm\x01\0\0\0garbage")
    (mods / "notes.txt").write_text("not a module")
    outside = where / "outside.wasm"
    shutil.copy(SAMPLES / "c_hello.wasm", outside)
    (mods / "escape.wasm").symlink_to(outside)
    (mods / "alias.wasm").symlink_to(mods / "c_hello.wasm")
    return mods


def slow_script(where: Path, delay_ms: int) -> Path:
    """multi_tool.json with every completion answered after `delay_ms`, so a
    run lasts long enough to be watched while it runs."""
    script = json.loads((SAMPLES / "scripts" / "multi_tool.json").read_text())
    for rule in script["rules"]:
        rule["reply"]["delay_ms"] = delay_ms
    path = where / f"multi_tool_{delay_ms}ms.json"
    path.write_text(json.dumps(script))
    return path


def sse_events(response: httpx.Response, stop_after: int | None = None
               ) -> Iterator[tuple[int, dict[str, Any]]]:
    """(id, record) of each event of an open SSE response."""
    event_id = None
    for line in response.iter_lines():
        if line.startswith("id: "):
            event_id = int(line[4:])
        elif line.startswith("data: "):
            assert event_id is not None
            record = json.loads(line[6:])
            assert record["seq"] == event_id
            yield event_id, record
            if stop_after is not None and event_id >= stop_after:
                return


def wait_for(client: httpx.Client, run_id: str, timeout: float = 30.0) -> dict[str, Any]:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        run: dict[str, Any] = client.get(f"/v1/runs/{run_id}").json()
        if run["status"] != "running":
            return run
        time.sleep(0.05)
    raise AssertionError(f"run {run_id} still running after {timeout} s")


def assert_problem(response: httpx.Response, status: int,
                   slug: str | None = None) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    body: dict[str, Any] = response.json()
    assert {"type", "title", "status", "detail"} <= set(body)
    assert body["status"] == status and body["detail"]
    if slug is not None:
        assert body["type"] == f"urn:spearpy:problem:{slug}", body
    return body


MAX_CONCURRENT = 3
CHAT_BACKEND = f"scripted:{SAMPLES / 'scripts' / 'chat.json'}"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BackgroundServer]:
    where = tmp_path_factory.mktemp("serve-api")
    host = HostConfig(backend=f"scripted:{slow_script(where, 150)}", cache_dir=None,
                      timeout=30)
    config = ServeConfig(modules_dir=modules_dir(where), state_dir=where / "state", host=host,
                         max_concurrent=MAX_CONCURRENT, grace=0.5, allow_models=("alt-model",),
                         allow_backends=(CHAT_BACKEND,))
    with BackgroundServer(create_app(config), grace=0.5) as running:
        yield running


@pytest.fixture
def client(server: BackgroundServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, timeout=30) as c:
        yield c


def test_create_and_wait_answers_with_the_finished_run(client: httpx.Client) -> None:
    started = time.time()
    reply = client.post("/v1/runs", json={"module": "c_multi_tool", "wait": True})
    assert reply.status_code == 201
    run = reply.json()
    assert reply.headers["location"] == f"/v1/runs/{run['id']}" == run["urls"]["self"]
    assert (run["status"], run["outcome"], run["exit_code"]) == ("finished", "exited", 0)
    assert MULTI_TOOL_STDOUT in run["stdout"]
    assert run["usage"]["total_tokens"] == 115
    assert started <= run["created_at"] <= run["ended_at"] <= time.time()
    assert run["elapsed_ms"] >= 4 * 150  # four completions, each answered after 150 ms
    [transcript] = run["transcripts"]
    assert transcript["messages"][-1]["content"] == '(2 + 3) * 4 = 20, and {"text":"DONE"}'
    assert run["limits_effective"]["timeout"] == 30
    # GET says the same.
    again = client.get(run["urls"]["self"]).json()
    assert again["stdout"] == run["stdout"] and again["outcome"] == "exited"


def test_create_without_wait_answers_at_once(client: httpx.Client) -> None:
    reply = client.post("/v1/runs", json={"module": "c_hello.wasm", "args": ["hi"]})
    assert reply.status_code == 201
    run = reply.json()
    assert run["status"] == "running" and run["outcome"] is None and "stdout" not in run
    done = wait_for(client, run["id"])
    assert (done["outcome"], done["exit_code"]) == ("exited", 0)
    assert "hello from C: ok" in done["stdout"] and "arg: hi" in done["stdout"]


def test_list_runs_newest_first_with_paging(client: httpx.Client) -> None:
    ids = [client.post("/v1/runs", json={"module": "alias", "args": [str(i)],
                                         "wait": True}).json()["id"] for i in range(3)]
    listed = client.get("/v1/runs", params={"limit": 2}).json()
    assert [run["id"] for run in listed["runs"]] == ids[::-1][:2]
    assert "stdout" not in listed["runs"][0] and listed["runs"][0]["status"] == "finished"
    rest = client.get(listed["next"]).json()
    assert rest["runs"][0]["id"] == ids[0]
    finished = client.get("/v1/runs", params={"status": "finished", "limit": 500}).json()
    assert set(ids) <= {run["id"] for run in finished["runs"]}


def test_events_are_the_events_file_records(server: BackgroundServer,
                                            client: httpx.Client) -> None:
    run = client.post("/v1/runs", json={"module": "c_multi_tool", "wait": True}).json()
    with client.stream("GET", run["urls"]["events"]) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        events = [record for _id, record in sse_events(response)]
    assert [e["seq"] for e in events] == list(range(len(events)))
    assert events[0]["kind"] == "run_start" and events[-1]["kind"] == "run_end"
    assert events[-1]["outcome"] == "exited" and events[-1]["exit_code"] == 0
    # The same events, field for field, as `--events` of the same run through Host.
    with Host(server.app.state.service.hosts.base.config) as host:
        direct = host.run(SAMPLES / "c_multi_tool.wasm", collect_events=True)
    expected = [event_record(e, include_content=True) for e in direct.events]
    assert [e["kind"] for e in events] == [e["kind"] for e in expected]
    # Call ids number the scripted server's requests, which other runs shared.
    volatile = {"run_id", "ts", "latency_ms", "duration_ms", "elapsed_ms", "tool_call_id"}
    for got, want in zip(events, expected, strict=True):
        assert {k: v for k, v in got.items() if k not in volatile} == \
            {k: v for k, v in want.items() if k not in volatile and k != "transcript"} | (
                {"transcript": got["transcript"]} if "transcript" in got else {})
    tools = [e for e in events if e["kind"] == "tool_end"]
    assert [t["name"] for t in tools] == ["add", "mul", "add", "upper"]
    assert all(t["source"] == "guest" and t["output"] for t in tools)
    [close] = [e for e in events if e["kind"] == "session_close"]
    assert close["transcript"]["messages"][1]["role"] == "user"


def test_events_live_while_the_run_goes_on(client: httpx.Client) -> None:
    run = client.post("/v1/runs", json={"module": "c_multi_tool"}).json()
    seen_while_running = []
    with client.stream("GET", run["urls"]["events"]) as response:
        for _id, record in sse_events(response):
            if record["kind"] == "tool_end" and record["iteration"] == 1:
                # Three more completions (150 ms each) are still to come.
                seen_while_running.append(client.get(run["urls"]["self"]).json()["status"])
            last = record
    assert seen_while_running == ["running"]
    assert last["kind"] == "run_end"


def test_last_event_id_resumes_without_gaps_or_repeats(client: httpx.Client) -> None:
    run = client.post("/v1/runs", json={"module": "c_multi_tool"}).json()
    with client.stream("GET", run["urls"]["events"]) as response:
        first = list(sse_events(response, stop_after=4))
    assert [i for i, _ in first] == [0, 1, 2, 3, 4]
    # Reconnect mid-run, as EventSource does, with the last id seen.
    with client.stream("GET", run["urls"]["events"], headers={"Last-Event-ID": "4"}) as response:
        rest = list(sse_events(response))
    ids = [i for i, _ in first + rest]
    assert ids == list(range(len(ids))) and rest[-1][1]["kind"] == "run_end"
    # After the end, a resume comes from the store.
    with client.stream("GET", run["urls"]["events"], headers={"Last-Event-ID": "17"}) as response:
        tail = [i for i, _ in sse_events(response)]
    assert tail == [18, 19, 20]
    # Not a seq, or past SQLite's integers (the stream used to break midway).
    for last in ("x", str(10**24), str(-10**24), str(2**63 - 1)):
        bad = client.get(run["urls"]["events"], headers={"Last-Event-ID": last})
        assert_problem(bad, 400, "bad-last-event-id")


def test_cancel_stops_a_spinning_guest(client: httpx.Client) -> None:
    run = client.post("/v1/runs", json={"module": "c_infinite_loop"}).json()
    with client.stream("GET", run["urls"]["events"]) as response:
        events = sse_events(response)
        assert next(events)[1]["kind"] == "run_start"
        reply = client.delete(run["urls"]["self"])
        assert reply.status_code == 202 and reply.json()["cancel_requested"] is True
        rest = [record for _id, record in events]
    assert rest[-1]["kind"] == "run_end" and rest[-1]["outcome"] == "cancelled"
    done = client.get(run["urls"]["self"]).json()
    assert (done["outcome"], done["exit_code"], done["cancel_reason"]) == \
        ("cancelled", 130, "request")
    assert "DELETE" in done["message"]
    assert_problem(client.delete(run["urls"]["self"]), 409, "run-ended")
    assert_problem(client.delete("/v1/runs/nope"), 404, "unknown-run")


def test_more_than_max_concurrent_gets_429(client: httpx.Client) -> None:
    spinning = [client.post("/v1/runs", json={"module": "c_infinite_loop"})
                for _ in range(MAX_CONCURRENT)]
    assert [r.status_code for r in spinning] == [201] * MAX_CONCURRENT
    refused = client.post("/v1/runs", json={"module": "c_hello"})
    body = assert_problem(refused, 429, "too-many-runs")
    assert refused.headers["retry-after"] == "1" and body["max_concurrent"] == MAX_CONCURRENT
    assert client.get("/readyz").json()["active_runs"] == MAX_CONCURRENT
    assert "spearpy_serve_runs_rejected_total 1.0" in client.get("/metrics").text
    for reply in spinning:
        client.delete(reply.json()["urls"]["self"])
    for reply in spinning:
        assert wait_for(client, reply.json()["id"])["outcome"] == "cancelled"
    # A slot is free again once a run ended.
    assert client.post("/v1/runs", json={"module": "c_hello", "wait": True}).status_code == 201


def test_a_request_picks_only_the_models_and_backends_the_operator_allows(
        client: httpx.Client) -> None:
    run = client.post("/v1/runs", json={"module": "c_multi_tool", "model": "alt-model",
                                        "wait": True}).json()
    assert run["exit_code"] == 0 and run["model"] == "alt-model"
    [send] = [e for e in events_of(client, run) if e["kind"] == "send_start"]
    assert send["model"] == "alt-model"
    chat = client.post("/v1/runs", json={"module": "c_chat", "backend": CHAT_BACKEND,
                                         "wait": True}).json()
    assert "assistant: Hello, wasm guest!" in chat["stdout"]
    other = client.post("/v1/runs", json={"module": "c_chat", "backend": "openai"})
    assert assert_problem(other, 422, "override-not-allowed")["field"] == "backend"


def events_of(client: httpx.Client, run: dict[str, Any]) -> list[dict[str, Any]]:
    with client.stream("GET", run["urls"]["events"]) as response:
        return [record for _id, record in sse_events(response)]


def test_modules_lists_what_inspect_says(client: httpx.Client) -> None:
    modules = {m["name"]: m for m in client.get("/v1/modules").json()["modules"]}
    assert set(modules) == {"alias.wasm", "broken.wasm", "c_chat.wasm", "c_hello.wasm",
                            "c_infinite_loop.wasm", "c_multi_tool.wasm"}
    multi = modules["c_multi_tool.wasm"]
    assert multi["runnable"] is True and multi["funcref_table"]
    assert {"cchat_create", "cchat_send"} <= {i["name"] for i in multi["spear_imports"]}
    assert modules["broken.wasm"]["runnable"] is False and modules["broken.wasm"]["problems"]
    one = client.get("/v1/modules/c_hello").json()
    assert one["sha256"] == modules["c_hello.wasm"]["sha256"]
    assert_problem(client.get("/v1/modules/escape"), 404, "unknown-module")


def test_metrics_count_the_runs(client: httpx.Client) -> None:
    client.post("/v1/runs", json={"module": "c_multi_tool", "wait": True})
    text = client.get("/metrics").text
    assert 'spearpy_runs_total{outcome="exited"}' in text
    assert 'spearpy_tool_calls_total{tool="mul"}' in text
    assert "spearpy_serve_runs_active" in text
    # The service's Host loaded the module at least once, and keeps it.
    assert re.search(r"\nspearpy_module_cache_misses_total [1-9]", text), text
    assert re.search(r"\nspearpy_module_cache_entries [1-9]", text), text


def test_health_ready_openapi_and_page(client: httpx.Client) -> None:
    assert client.get("/healthz").json() == {"status": "ok"}
    assert client.get("/readyz").json()["status"] == "ready"
    spec = client.get("/v1/openapi.json").json()
    assert spec["openapi"].startswith("3.") and "/v1/runs/{run_id}/events" in spec["paths"]
    page = client.get("/")
    assert page.status_code == 200 and "<title>spearpy serve</title>" in page.text
    assert client.get("/static/app.js").status_code == 200
    assert_problem(client.get("/static/../app.py"), 404)


@pytest.mark.parametrize(("body", "status", "slug"), [
    ({"args": []}, 422, "invalid-request"),
    ({"module": "c_hello", "args": [1]}, 422, "invalid-request"),
    ({"module": "c_hello", "surprise": 1}, 422, "invalid-request"),
    ({"module": "c_hello", "env": {"A": None}}, 422, "invalid-request"),
    ({"module": "c_hello", "args": ["a\0b"]}, 422, "invalid-request"),
    ({"module": "nothing-here"}, 422, "unknown-module"),
    ({"module": "broken"}, 422, "module-load-error"),
    ({"module": "c_hello", "limits": {"timeout": 31}}, 422, "limit-exceeded"),
    ({"module": "c_hello", "limits": {"timeout": -1}}, 422, "invalid-request"),
    ({"module": "c_hello", "limits": {"max_iterations": 2}}, 422, "unknown-limit"),
    ({"module": "c_hello", "model": "gpt-5"}, 422, "override-not-allowed"),
    ([1, 2], 422, "invalid-request"),
])
def test_bad_requests_get_problem_bodies(client: httpx.Client, body: Any, status: int,
                                         slug: str) -> None:
    problem = assert_problem(client.post("/v1/runs", json=body), status, slug)
    if slug == "limit-exceeded":
        assert (problem["limit"], problem["maximum"]) == ("timeout", 30)
        assert "timeout" in problem["detail"]


def test_protocol_errors_get_problem_bodies(client: httpx.Client) -> None:
    assert_problem(client.get("/nope"), 404)
    assert_problem(client.put("/v1/runs"), 405)
    assert_problem(client.post("/v1/runs", content=b"{", headers={
        "content-type": "application/json"}), 400, "invalid-json")
    assert_problem(client.post("/v1/runs", content=b'{"module":"c_hello"}', headers={
        "content-type": "text/plain"}), 415, "unsupported-media-type")
    assert_problem(client.get("/v1/runs/nope"), 404, "unknown-run")
    assert_problem(client.get("/v1/runs/nope/events"), 404, "unknown-run")
    assert_problem(client.get("/v1/runs", params={"limit": "x"}), 400, "bad-query")
    for before in ("nan", "inf", "1e400"):
        assert_problem(client.get("/v1/runs", params={"before": before}), 400, "bad-query")
    # Without a token, only loopback names: a DNS-rebinding page sends its own.
    assert_problem(client.get("/v1/runs", headers={"host": "evil.example:8700"}), 421)
    assert client.get("/healthz", headers={"host": "localhost:1"}).status_code == 200


def test_a_replaced_module_is_run_once_its_cache_entry_is_old(tmp_path: Path) -> None:
    mods = tmp_path / "modules"
    mods.mkdir()
    shutil.copy(SAMPLES / "c_hello.wasm", mods / "agent.wasm")
    config = ServeConfig(modules_dir=mods, state_dir=tmp_path / "state",
                         host=HostConfig(backend=CHAT_BACKEND, cache_dir=None))
    with BackgroundServer(create_app(config), grace=0.5) as running, \
            httpx.Client(base_url=running.url, timeout=30) as c:
        first = c.post("/v1/runs", json={"module": "agent", "wait": True}).json()
        shutil.copy(SAMPLES / "c_chat.wasm", mods / "agent.wasm")
        time.sleep(1.2)  # RecentModules keeps what it loaded for 1 s
        second = c.post("/v1/runs", json={"module": "agent", "wait": True}).json()
        (mods / "agent.wasm").unlink()
        time.sleep(1.2)
        gone = c.post("/v1/runs", json={"module": "agent", "wait": True})
    assert first["sha256"] != second["sha256"]
    assert "hello" in first["stdout"].lower() and second["outcome"] == "exited"
    assert_problem(gone, 422, "unknown-module")


def test_a_runs_guest_log_lines_are_kept_and_served(client: httpx.Client) -> None:
    run = client.post("/v1/runs", json={"module": "c_hello", "wait": True}).json()
    assert run["outcome"] == "exited" and run["urls"]["logs"] == f"/v1/runs/{run['id']}/logs"
    logs = client.get(run["urls"]["logs"]).json()
    assert logs["id"] == run["id"] and logs["dropped"] == 0
    assert logs["logs"] and all(set(line) == {"level", "text"} for line in logs["logs"])
    assert client.get("/v1/runs/nope/logs").status_code == 404
