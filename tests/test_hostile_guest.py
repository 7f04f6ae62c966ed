"""Hostile guests: each must end the way the limits say, with its outcome
reported, while a well-behaved guest on the same Host (another thread)
finishes correctly.

Whole runs of WAT entry points (tests/wat/hostile_run.wat) and of the
hostile samples in wasm-samples/, each with per-run limits through
`Host.run(limits=...)`, and cancellation from another thread. Hostile tools,
allocators and hostcall arguments are in test_hostile_tools.py, which shares
the neighbour and the routed upstream defined here.

No assertion is about time. A run that hangs fails through its watchdog
(`HANG_GUARD_S`), far above anything a passing run needs.
"""

from __future__ import annotations

import contextlib
import json
import stat
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import wasmtime

from spearpy import abi
from spearpy.capture import MAX_CAPTURE_BYTES
from spearpy.context import RunOptions
from spearpy.fds import ChatSessionFd
from spearpy.host import Host
from spearpy.testing import ScriptedServer
from tests.probe import Probe, tool_schema, wat_module
from tests.test_hostile_upstream import assert_valid_transcript

# A hostcall that hits a host bug answers EIO and logs; here it fails the test.
pytestmark = pytest.mark.usefixtures("no_host_bugs")
ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "wasm-samples"
SCRIPTS = SAMPLES / "scripts"
HANG_GUARD_S = 60.0
RUN = wat_module("hostile_run.wat")
NEIGHBOURS = ("c_tool_sum.wasm", "rust_tool_sum.wasm")
SUM_ANSWER = b'answer: 7 + 35 = {"sum":42}'


def routed_script() -> dict[str, Any]:
    """The sample scripts in one: each sample's rules (and default) answer
    only requests offering that sample's tool, so the hostile sample and its
    well-behaved neighbour can share one upstream."""
    rules: list[dict[str, Any]] = []
    for tool, name in (("sum", "tool_sum"), ("boom", "trap_tool"), ("liar_len", "lying_tool"),
                       ("dump", "big_output")):
        script = json.loads((SCRIPTS / f"{name}.json").read_text())
        only = {"tool_names_include": [tool]}
        for rule in script["rules"]:
            rules.append({**rule, "when": {**rule.get("when", {}), **only}})
        rules.append({"name": f"{name} default", "when": only, "reply": script["default"]})
    return {"rules": rules + hostile_tool_rules(), "default": {"content": "pong"}}


def hostile_tool_rules() -> list[dict[str, Any]]:
    """For sessions offering the hostile tools: the model calls the tool the
    user names, then echo, then answers with the last tool output."""
    def reply(request: dict[str, Any]) -> dict[str, Any]:
        name = request["messages"][-1]["content"]
        return {"tool_calls": [{"name": name, "arguments": {"x": 1}},
                               {"name": "echo", "arguments": {"y": 2}}]}
    only = {"tool_names_include": ["scribble"]}
    return [{"when": {"last_role": "user", **only}, "reply": reply},
            {"when": only, "reply": {"content": "final: {{last_tool}}"}}]


@pytest.fixture(scope="module")
def upstream() -> Iterator[ScriptedServer]:
    with ScriptedServer(routed_script()) as server:
        yield server


@pytest.fixture
def host(upstream: ScriptedServer) -> Iterator[Host]:
    # No guest limits on the host itself: each hostile run brings its own.
    h = Host(base_url=upstream.base_url, model="scripted", max_retries=0, cache_dir=None)
    yield h
    h.close()


@contextmanager
def neighbour_running(host: Host) -> Iterator[None]:
    """Well-behaved agents run in a loop on another thread for as long as the
    block lasts (at least once each); every one must get the right answer."""
    stop = threading.Event()
    failures: list[str] = []
    done = [0]

    def loop() -> None:
        while not stop.is_set() or done[0] < len(NEIGHBOURS):
            name = NEIGHBOURS[done[0] % len(NEIGHBOURS)]
            try:
                result = host.run(SAMPLES / name)
            except Exception as exc:  # reported below; the thread must not die silently
                failures.append(f"{name}: {exc!r}")
                return
            if not result.ok or SUM_ANSWER not in (result.stdout or b""):
                failures.append(f"{name}: {result.outcome} {result.exit_code} {result.message} "
                                f"{(result.stdout or b'')[-300:]!r}")
                return
            done[0] += 1

    thread = threading.Thread(target=loop, name="neighbour", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(HANG_GUARD_S)
    assert not thread.is_alive(), "the well-behaved neighbour hung"
    assert failures == []
    assert done[0] >= len(NEIGHBOURS)


def run_hostile(host: Host, module: Any, **kwargs: Any) -> Any:
    """One hostile run on its own thread, watched: a hang fails the test."""
    handle = host.start(module, **kwargs)
    try:
        return handle.result(timeout=HANG_GUARD_S)
    except TimeoutError:
        handle.cancel()
        pytest.fail(f"the hostile run did not end within {HANG_GUARD_S} s")


# ---- whole runs -----------------------------------------------------------------------

MiB = 1 << 20
RUN_CASES = [
    # entry, per-run limits, outcome, exit code, words the message must contain
    ("spin", {"timeout": 0.5}, "timeout", 124, "deadline"),
    ("spin", {"fuel": 2_000_000}, "fuel_exhausted", 135, "fuel"),
    ("recurse", {}, "trap", 134, "stack overflow"),
    ("grow_then_trap", {"max_memory": 64 * MiB}, "memory_limit", 137, "memory limit"),
    ("grow_then_oob", {"max_memory": 64 * MiB}, "memory_limit", 137, "memory limit"),
    ("grow_a_lot", {"max_memory": 64 * MiB}, "exited", 0, ""),
    ("sleep_long", {"timeout": 0.5}, "timeout", 124, "deadline"),
    ("epoll_long", {"timeout": 0.5}, "timeout", 124, "deadline"),
    ("sleep_negative", {}, "exited", 7, ""),
    ("log_flood", {"max_log_bytes": 100_000}, "log_limit", 136, "max_log_bytes"),
    ("fd_flood", {"max_open_fds": 16}, "exited", -abi.EMFILE, ""),
    ("table_grow", {}, "exited", 1, ""),
    ("wasi_sleep", {"timeout": 0.5}, "timeout", 124, "deadline"),
    ("wasi_abs_sleep", {}, "exited", 1, ""),
    ("wasi_poll_edges", {}, "exited", 5, ""),
]


@pytest.mark.parametrize(("entry", "limits", "outcome", "code", "words"), RUN_CASES,
                         ids=[f"{c[0]}-{c[2]}" for c in RUN_CASES])
def test_hostile_run_ends_as_its_limit_says(host: Host, entry: str, limits: dict[str, Any],
                                            outcome: str, code: int, words: str) -> None:
    with neighbour_running(host):
        result = run_hostile(host, RUN, invoke=entry, limits=limits)
    assert (result.outcome, result.exit_code) == (outcome, code), result.message
    assert words in result.message


def test_printing_forever_fills_neither_memory_nor_disk(
        host: Host, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # this process's runs only
    seen: list[str] = []
    stop = threading.Event()

    def watch_scratch() -> None:
        # A run's capture paths must never be growing files (stdin may be).
        while not stop.wait(0.02):
            for path in [*tmp_path.glob("spearpy-*/stdout"), *tmp_path.glob("spearpy-*/stderr")]:
                with contextlib.suppress(OSError):
                    mode = path.stat().st_mode
                    seen.append("fifo" if stat.S_ISFIFO(mode) else f"file {path}")

    watcher = threading.Thread(target=watch_scratch, daemon=True)
    watcher.start()
    try:
        with neighbour_running(host):
            result = run_hostile(host, RUN, invoke="print_flood", limits={"timeout": 1})
    finally:
        stop.set()
        watcher.join()
    assert (result.outcome, result.exit_code) == ("timeout", 124)
    assert len(result.stdout or b"") == MAX_CAPTURE_BYTES  # the first 64 MiB, no more
    assert seen and set(seen) == {"fifo"}


def test_guest_data_the_host_keeps_is_bounded(host: Host) -> None:
    # Linear memory is capped by --max-memory; copies of it the host keeps
    # (messages written again and again) by max_host_bytes, lowered here.
    with neighbour_running(host):
        result = run_hostile(host, RUN, invoke="msg_flood",
                             limits={"max_memory": 64 * MiB, "max_host_bytes": 4 * MiB})
    assert (result.outcome, result.exit_code) == ("memory_limit", 137)
    assert "keep more than 4194304 bytes" in result.message
    kept = sum(len(m["content"]) for t in result.transcripts for m in t["messages"])
    assert 4 * MiB - 65536 <= kept <= 4 * MiB


def test_tool_outputs_within_one_send_are_bounded(scripted: Any) -> None:
    server = scripted({"default": {"tool_calls": [{"name": "big"}] * 20}})
    with Host(base_url=server.base_url, model="m", max_retries=0, cache_dir=None,
              max_host_bytes=2 * MiB) as h:
        p = Probe(h, wat_module("probe.wat"))
        try:
            p.call("set_big", 500_000)
            fd = p.hc("cchat_create")
            assert p.write_fn(fd, 5, tool_schema("big")) == 0
            assert p.set_param(fd, "max_tool_output_bytes", 1 << 20) == 0
            assert p.write_msg(fd, "user", "go") == 0
            with pytest.raises(wasmtime.WasmtimeError, match="keep more than"):
                p.hc("cchat_send", fd, abi.SEND_AUTO_TOOL_CALL)
            noted = p.run.interrupts.noted
            assert noted is not None and noted[0] == "memory_limit"
            messages = list(p.run.fds.get(fd, ChatSessionFd).session.messages)
        finally:
            p.close()
    assert_valid_transcript(messages)
    outputs = [m for m in messages if m["role"] == "tool" and m["content"].startswith("x")]
    assert 3 <= len(outputs) <= 5  # stopped at the budget, not after all 20


def test_flooded_fd_table_stops_at_the_per_run_cap(host: Host) -> None:
    events: list[Any] = []
    result = run_hostile(host, RUN, invoke="fd_flood", limits={"max_open_fds": 16},
                         on_event=events.append)
    assert result.exit_code == -abi.EMFILE
    # Exactly the cap was opened (and closed again at the end of the run).
    assert sum(1 for e in events if e.kind == "session_close") == 16


@pytest.mark.parametrize(("wat", "outcome", "code", "words"), [
    ('(memory (export "memory") 32768)', "memory_limit", 137, "initial memory"),
    ('(memory (export "memory") 1) (memory 1)', "load_error", 65, "memory count"),
    ('(memory (export "memory") 1) (table 2000000 funcref)', "load_error", 65, "table"),
], ids=["initial-memory-over-cap", "two-memories", "huge-table"])
def test_modules_asking_too_much_at_start_are_refused(host: Host, wat: str, outcome: str,
                                                      code: int, words: str) -> None:
    module = bytes(wasmtime.wat2wasm(f'(module {wat} (func (export "_start")))'))
    with neighbour_running(host):
        result = run_hostile(host, module, limits={"max_memory": 64 * MiB})
    assert (result.outcome, result.exit_code) == (outcome, code), result.message
    assert words in result.message


def test_bad_per_run_limits_are_refused(host: Host) -> None:
    with pytest.raises(ValueError, match="unknown run limits"):
        host.run(RUN, limits={"max_iterations": 3})
    with pytest.raises(ValueError, match="timeout"):
        host.run(RUN, limits={"timeout": -1})


# ---- cancellation from another thread --------------------------------------------------


@pytest.mark.parametrize("entry", ["spin", "sleep_long", "epoll_long", "wasi_sleep"])
def test_cancel_from_another_thread_ends_the_run(host: Host, entry: str) -> None:
    cancel = threading.Event()
    started = threading.Event()

    def on_event(event: Any) -> None:
        if event.kind == "run_start":
            started.set()

    with neighbour_running(host):
        handle = host.start(RUN, invoke=entry, cancel=cancel, on_event=on_event)
        assert started.wait(HANG_GUARD_S)
        threading.Timer(0.05, cancel.set).start()  # from yet another thread
        result = handle.result(timeout=HANG_GUARD_S)
    assert (result.outcome, result.exit_code) == ("cancelled", 130)
    assert "cancelled" in result.message


def test_an_idle_host_moves_no_epochs_and_the_next_run_still_meets_its_deadline(
        host: Host) -> None:
    # The ticker sleeps while no run is in progress (it woke 100 times a
    # second for nothing): no epoch moves over a quiet spell...
    ticker = host._ticker
    time.sleep(0.05)  # a tick begun before the Host went idle may still land
    quiet = ticker.ticks
    time.sleep(0.3)
    assert ticker.ticks - quiet <= 1
    # ...and the next run wakes it: a spinning guest is still stopped.
    result = run_hostile(host, RUN, invoke="spin", limits={"timeout": 0.5})
    assert (result.outcome, result.exit_code) == ("timeout", 124), result.message
    assert ticker.ticks > quiet


def test_cancel_while_the_upstream_is_slow(scripted: Any) -> None:
    # The model takes 60 s to answer; the watchdog (HANG_GUARD_S) is shorter.
    server = scripted({"default": {"content": "late", "delay_ms": 60_000}})
    with Host(base_url=server.base_url, model="m", max_retries=0, cache_dir=None) as h:
        cancel = threading.Event()
        handle = h.start(SAMPLES / "c_chat.wasm", cancel=cancel)

        def cancel_once_asked() -> None:
            while not server.requests and not handle.done():
                threading.Event().wait(0.01)
            cancel.set()

        threading.Thread(target=cancel_once_asked, daemon=True).start()
        result = handle.result(timeout=HANG_GUARD_S)
    assert (result.outcome, result.exit_code) == ("cancelled", 130)
    assert len(server.requests) == 1


def test_cancel_during_a_retry_backoff_sends_nothing_more(scripted: Any) -> None:
    # Every answer is 503 asking for a 30 s wait; 5 retries would take minutes.
    server = scripted({"default": {"status": 503, "headers": {"Retry-After": "30"}}})
    with Host(base_url=server.base_url, model="m", max_retries=5, cache_dir=None) as h:
        cancel = threading.Event()
        handle = h.start(SAMPLES / "c_chat.wasm", cancel=cancel)
        while not server.requests and not handle.done():
            threading.Event().wait(0.01)
        cancel.set()
        result = handle.result(timeout=HANG_GUARD_S)
    assert result.outcome == "cancelled"
    assert len(server.requests) == 1


def test_run_deadline_bounds_a_slow_upstream(scripted: Any) -> None:
    server = scripted({"default": {"content": "late", "delay_ms": 60_000}})
    with Host(base_url=server.base_url, model="m", max_retries=3, cache_dir=None) as h:
        result = run_hostile(h, SAMPLES / "c_chat.wasm", limits={"timeout": 1})
    assert (result.outcome, result.exit_code) == ("timeout", 124)
    assert len(server.requests) == 1  # the deadline ended the wait; no retry after it


# ---- the hostile samples -------------------------------------------------------------

SAMPLE_CASES = [
    # sample, per-run limits, outcome, exit code, stdout lines
    ("c_infinite_loop", {"timeout": 1}, "timeout", 124, ["spinning forever"]),
    ("c_infinite_loop", {"fuel": 50_000_000}, "fuel_exhausted", 135, ["spinning forever"]),
    ("c_memory_bomb", {"max_memory": 256 * MiB}, "exited", 0, ["memory.grow refused after"]),
    ("c_oob_pointers", {}, "exited", 0, ["mismatches: 0", "recv after the abuse: body intact"]),
    ("c_lying_tool", {}, "exited", 0, ["answer: survived all four lies"]),
    ("c_trap_tool", {}, "exited", 0, ['answer: after the trap: {"text":"still alive"}']),
    ("rust_panic_tool", {}, "exited", 0, ['answer: after the trap: {"text":"still alive"}']),
    ("c_fd_exhaustion", {}, "exited", 0, ["EMFILE after 1024 sessions",
                                          "create after close: new fd"]),
    ("c_fd_exhaustion", {"max_open_fds": 40}, "exited", 0, ["EMFILE after 40 sessions"]),
    ("c_log_flood", {}, "exited", 0, ["flood: 100000 lines", "16385-byte line: EINVAL"]),
    ("c_log_flood", {"max_log_bytes": 100_000}, "log_limit", 136, []),
]


@pytest.mark.parametrize(("name", "limits", "outcome", "code", "lines"), SAMPLE_CASES,
                         ids=[f"{c[0]}-{c[2]}" for c in SAMPLE_CASES])
def test_hostile_sample_beside_a_good_neighbour(host: Host, name: str, limits: dict[str, Any],
                                                outcome: str, code: int,
                                                lines: list[str]) -> None:
    with neighbour_running(host):
        result = run_hostile(host, SAMPLES / f"{name}.wasm", limits=limits)
    stdout = (result.stdout or b"").decode("utf-8", "replace")
    assert (result.outcome, result.exit_code) == (outcome, code), (result.message, stdout[-800:])
    for line in lines:
        assert line in stdout
    for transcript in result.transcripts:
        assert_valid_transcript(transcript["messages"])


def test_a_live_instance_call_is_a_run_in_progress_for_the_ticker(host: Host) -> None:
    # Export by export (spearpy.testing): its wasm still stops at its
    # deadline, which needs the ticker awake although Host.run is not used.
    probe = Probe(host, RUN, RunOptions(capture_output=True, limits={"timeout": 0.3}))
    outcome: list[BaseException | object] = []
    thread = threading.Thread(target=lambda: outcome.append(_call_spin(probe)), daemon=True)
    thread.start()
    thread.join(HANG_GUARD_S)
    assert not thread.is_alive(), "spinning wasm in a live instance was never interrupted"
    assert isinstance(outcome[0], (wasmtime.Trap, wasmtime.WasmtimeError)), outcome
    assert probe.run.interrupts.reason() is not None  # its deadline, noted
    probe.close()


def _call_spin(probe: Probe) -> BaseException | object:
    try:
        return probe.call("spin")
    except BaseException as exc:  # the trap is the expected result
        return exc
