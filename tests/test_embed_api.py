"""The embedding API: one Host shared by many threads, background runs that
can be cancelled, asyncio, module handles and the compile caches."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

import spearpy
from spearpy import Host, HostConfig, LoadedModule, RunHandle, RunResult
from tests.test_embed_support import (
    ECHO_WASM,
    LOOP_WAT,
    SLEEP_WAT,
    echo_script,
    echo_wasm,
    expected_stdout,
    wat,
)

THREADS = 32
HELLO = Path(__file__).resolve().parents[1] / "wasm-samples" / "c_hello.wasm"


def _barrier_script(parties: int) -> dict[str, Any]:
    """The echo script, except that no first completion is answered until
    `parties` of them are waiting at the model at the same time."""
    barrier = threading.Barrier(parties, timeout=60)

    def first(request: dict[str, Any]) -> dict[str, Any]:
        barrier.wait()  # BrokenBarrierError (-> HTTP 500) if the runs were serialized
        return {"tool_calls": [{"name": "echo", "arguments": {"text": "{{last_user}}"}}]}

    script = echo_script()
    script["rules"][0]["reply"] = first
    return script


def _prompt(i: int) -> str:
    return f"thread-{i}: tok{i:02d} {'x' * i} stdin-{i}"


def test_public_api_is_reexported() -> None:
    assert spearpy.Host is Host and spearpy.HostConfig is HostConfig
    assert {"Host", "HostConfig", "RunResult", "LoadedModule", "RunHandle", "ModuleLoadError",
            "SpearpyError", "ConfigError"} <= set(spearpy.__all__)


def test_committed_example_binary_matches_its_source() -> None:
    assert ECHO_WASM.read_bytes() == echo_wasm(), "rebuild examples/guests/echo_agent.wasm"


def test_32_threads_share_one_host_without_crossing(make_host: Any, scripted: Any) -> None:
    server = scripted(_barrier_script(THREADS))
    host = make_host(base_url=server.base_url)
    module = host.load(echo_wasm(), name="echo_agent.wasm")
    results: list[RunResult | None] = [None] * THREADS
    errors: list[BaseException] = []

    def worker(i: int) -> None:
        try:
            results[i] = host.run(module, [f"tok{i:02d}", "x" * i], env={
                "PROMPT_PREFIX": f"thread-{i}: "}, stdin=f" stdin-{i}", collect_events=True)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    run_ids = set()
    for i, result in enumerate(results):
        assert result is not None
        prompt = _prompt(i)
        assert (result.outcome, result.exit_code, result.message) == ("exited", 0, "")
        assert result.stdout is not None and result.stdout.decode() == expected_stdout(prompt)
        run_ids.add(result.run_id)
        # Its own session, fd numbering and conversation: nothing from another thread.
        [transcript] = result.transcripts
        assert transcript["run_id"] == result.run_id and transcript["session_fd"] == 1000
        user, call, tool, answer = transcript["messages"]
        assert user == {"role": "user", "content": prompt}
        arguments = json.loads(call["tool_calls"][0]["function"]["arguments"])
        assert arguments == {"text": prompt}
        assert tool["tool_call_id"] == call["tool_calls"][0]["id"]
        assert json.loads(tool["content"]) == {"text": prompt}
        assert answer["content"] == "echo: " + tool["content"]
        # Its own event stream, numbered from 0, counting its own tokens.
        assert {e.run_id for e in result.events} == {result.run_id}
        assert [e.seq for e in result.events] == list(range(len(result.events)))
        ends = [e for e in result.events if e.kind == "completion_end"]
        assert len(ends) == 2
        assert result.usage["total_tokens"] == sum(e.data["usage"]["total_tokens"] for e in ends)
        [tool_end] = [e for e in result.events if e.kind == "tool_end"]
        assert tool_end.data["output_bytes"] == len(tool["content"].encode())
    assert len(run_ids) == THREADS
    # Upstream saw 64 consistent conversations: every tool result answers its own prompt.
    bodies = [r.body for r in server.requests]
    assert len(bodies) == 2 * THREADS
    for body in bodies:
        assert body is not None
        messages = body["messages"]
        if len(messages) > 1:
            assert json.loads(messages[2]["content"]) == {"text": messages[0]["content"]}


def test_modules_as_path_bytes_or_handle(make_host: Any, scripted: Any) -> None:
    server = scripted(echo_script())
    host = make_host(base_url=server.base_url)
    handle = host.load(ECHO_WASM)
    assert isinstance(handle, LoadedModule)
    outputs = {host.run(source, ["same"]).stdout for source in
               (ECHO_WASM, str(ECHO_WASM), ECHO_WASM.read_bytes(), handle)}
    assert outputs == {expected_stdout("same").encode()}
    # Compiled once per Host: the same code object behind every form.
    assert host.load(ECHO_WASM.read_bytes()).module is handle.module


_LOAD_IN_A_NEW_PROCESS = """
import sys
from spearpy import Host
with Host(cache_dir=sys.argv[1], model="m") as host:
    print(host.load(sys.argv[2]).from_disk_cache)
"""


def test_second_process_loads_from_the_disk_cache(tmp_path: Path) -> None:
    def load_in_subprocess() -> str:
        done = subprocess.run([sys.executable, "-c", _LOAD_IN_A_NEW_PROCESS, str(tmp_path),
                               str(ECHO_WASM)], capture_output=True, text=True, timeout=120,
                              check=True)
        return done.stdout.strip()

    assert load_in_subprocess() == "False"  # compiled, then written to the cache
    assert list((tmp_path / "modules").glob("*.cwasm"))
    assert load_in_subprocess() == "True"


def _start_and_wait_running(host: Host, wasm: bytes) -> RunHandle:
    started = threading.Event()
    handle = host.start(wasm, on_event=lambda e: started.set() if e.kind == "run_start" else None)
    assert started.wait(30)
    return handle


@pytest.mark.parametrize("guest", [LOOP_WAT, SLEEP_WAT], ids=["infinite_loop", "sleep_ms"])
def test_cancel_from_another_thread(make_host: Any, guest: str) -> None:
    host = make_host()
    handle = _start_and_wait_running(host, wat(guest))
    time.sleep(0.2)  # let the guest reach its loop / its sleep_ms call
    assert not handle.done()
    canceller = threading.Thread(target=handle.cancel)
    canceller.start()
    canceller.join()
    result = handle.result(timeout=30)  # returns promptly; 30 s only bounds a hang
    assert (result.outcome, result.exit_code) == ("cancelled", 130)
    assert handle.done() and handle.cancel_requested


def test_cancel_after_the_end_changes_nothing(make_host: Any, scripted: Any) -> None:
    host = make_host(base_url=scripted(echo_script()).base_url)
    handle = host.start(ECHO_WASM, ["hi"])
    result = handle.result(timeout=60)
    handle.cancel()
    assert handle.result() is result and result.ok
    seen: list[RunHandle] = []
    handle.add_done_callback(seen.append)
    assert seen == [handle]


def test_run_handle_reports_host_errors(make_host: Any) -> None:
    handle = make_host().start(b"not wasm")
    with pytest.raises(spearpy.ModuleLoadError):
        handle.result(timeout=30)


def test_run_async_runs_concurrently_without_blocking_the_loop(make_host: Any,
                                                                scripted: Any) -> None:
    # 40 runs held at the model together: more than asyncio's default executor
    # has threads, so this also proves run_async does not queue runs there.
    runs = 40
    script = _barrier_script(runs)
    answer = script["rules"][0]["reply"]
    pings: list[bool] = []
    loop_holder: list[asyncio.AbstractEventLoop] = []

    async def ping() -> bool:
        return True

    def reply(request: dict[str, Any]) -> dict[str, Any]:
        # The event loop must keep serving while guests wait on the model.
        future = asyncio.run_coroutine_threadsafe(ping(), loop_holder[0])
        pings.append(future.result(timeout=30))
        result: dict[str, Any] = answer(request)
        return result

    script["rules"][0]["reply"] = reply
    host: Host = make_host(base_url=scripted(script).base_url)

    async def main() -> list[RunResult]:
        loop_holder.append(asyncio.get_running_loop())
        return await asyncio.gather(*(host.run_async(ECHO_WASM, [f"async-{i}"])
                                      for i in range(runs)))

    results = asyncio.run(main())
    assert [r.stdout for r in results] == [
        expected_stdout(f"async-{i}").encode() for i in range(runs)]
    assert pings == [True] * runs


def test_cancelling_the_awaiting_task_cancels_the_guest(make_host: Any) -> None:
    host = make_host()
    ended: list[str] = []
    started = threading.Event()

    def on_event(event: Any) -> None:
        if event.kind == "run_start":
            started.set()
        elif event.kind == "run_end":
            ended.append(event.data["outcome"])

    async def main() -> None:
        task = asyncio.create_task(host.run_async(wat(LOOP_WAT), on_event=on_event))
        while not started.is_set():
            await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    assert ended == ["cancelled"]  # the guest ended before the task finished cancelling


def test_host_config_or_shorthand_fields() -> None:
    config = HostConfig(base_url="http://127.0.0.1:9/v1", model="m", timeout=5, cache_dir=None)
    with Host(config) as a, Host(base_url="http://127.0.0.1:9/v1", model="m", timeout=5,
                                 cache_dir=None) as b:
        assert a.config == b.config
        with Host(config, timeout=7) as c:
            assert c.config.timeout == 7 and c.config.model == "m"


@pytest.mark.parametrize(("kwargs", "error", "says"), [
    ({"argv": ["ok", 3]}, TypeError, "argv entries must be str: 3"),
    ({"env": {"A": 1}}, TypeError, "env entries must be str: 'A': 1"),
    ({"argv": ["a\0b"]}, ValueError, "cannot contain NUL"),
    ({"env": {"K=V": "x"}}, ValueError, "without '='"),
    ({"env": {"": "x"}}, ValueError, "non-empty"),
    ({"dirs": [("/nonexistent-dir", "/data")]}, ValueError, "'/nonexistent-dir' is not a dir"),
])
def test_argv_env_and_dirs_are_checked_before_the_run(make_host: Any, kwargs: dict[str, Any],
                                                 error: type[Exception], says: str) -> None:
    events: list[Any] = []
    with pytest.raises(error, match=re.escape(says)):
        make_host().run(HELLO, on_event=events.append, **kwargs)
    assert events == []  # nothing started


@pytest.mark.parametrize("guest", [LOOP_WAT, SLEEP_WAT], ids=["spinning", "sleeping"])
def test_closing_the_host_cancels_runs_in_progress(make_host: Any, guest: str) -> None:
    """close() used to stop the epoch ticker first, and a spinning guest then
    ran on beyond every deadline and cancel."""
    host = make_host()
    started = threading.Event()
    handle = host.start(wat(guest), on_event=lambda e: e.kind == "run_start" and started.set())
    assert started.wait(30)
    host.close()
    result = handle.result(timeout=60)  # a hang guard, not a timing assertion
    assert (result.outcome, result.exit_code) == ("cancelled", 130)
    assert result.message == "the Host was closed during the run"
    with pytest.raises(RuntimeError, match="closed"):
        host.run(wat(guest))
