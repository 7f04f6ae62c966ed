"""Hostile guests: each must end the way the limits say, with its outcome
reported, while a well-behaved guest on the same Host (another thread)
finishes correctly.

Three layers: whole runs of WAT entry points (tests/wat/hostile_run.wat) and
of the hostile samples in wasm-samples/, per-run limits through
`Host.run(limits=...)`; tools and allocators that misbehave inside an auto
send (tests/wat/hostile_tools.wat, driven through tests/probe.py); and bad
pointers and lengths handed to every hostcall that takes one.

No assertion is about time. A run that hangs fails through its watchdog
(`HANG_GUARD_S`), far above anything a passing run needs.
"""

from __future__ import annotations

import contextlib
import json
import stat
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import wasmtime

from spearpy import abi, instance
from spearpy.capture import MAX_CAPTURE_BYTES
from spearpy.fdtable import FdKind
from spearpy.host import Host
from spearpy.instance import GuestRun
from spearpy.testing import ScriptedServer
from tests.probe import Probe, tool_schema, wat_module
from tests.test_hostile_upstream import assert_valid_transcript

LOG_HOST_BUG = GuestRun.note_host_bug  # before the autouse fixture replaces it
ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "wasm-samples"
SCRIPTS = SAMPLES / "scripts"
HANG_GUARD_S = 60.0
RUN = wat_module("hostile_run.wat")
TOOLS = wat_module("hostile_tools.wat")
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


@pytest.fixture(autouse=True)
def no_host_bugs(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """A hostcall that hits a host bug answers EIO and logs; here it fails the test."""
    bugs: list[str] = []

    def record(_run: GuestRun, where: str, exc: BaseException) -> None:
        bugs.append(f"{where}: {type(exc).__name__}: {exc}")

    monkeypatch.setattr(GuestRun, "note_host_bug", record)
    yield bugs
    assert bugs == []


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


def test_guest_data_the_host_keeps_is_bounded(host: Host,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    # Linear memory is capped by --max-memory; copies of it the host keeps
    # (messages written again and again) by MAX_HOST_BYTES, lowered here.
    monkeypatch.setattr(instance, "MAX_HOST_BYTES", 4 * MiB)
    with neighbour_running(host):
        result = run_hostile(host, RUN, invoke="msg_flood", limits={"max_memory": 64 * MiB})
    assert (result.outcome, result.exit_code) == ("memory_limit", 137)
    assert "keep more than 4194304 bytes" in result.message
    kept = sum(len(m["content"]) for t in result.transcripts for m in t["messages"])
    assert 4 * MiB - 65536 <= kept <= 4 * MiB


def test_tool_outputs_within_one_send_are_bounded(monkeypatch: pytest.MonkeyPatch,
                                                  scripted: Any) -> None:
    monkeypatch.setattr(instance, "MAX_HOST_BYTES", 2 * MiB)
    server = scripted({"default": {"tool_calls": [{"name": "big"}] * 20}})
    with Host(base_url=server.base_url, model="m", max_retries=0, cache_dir=None) as h:
        p = Probe(h, wat_module("probe.wat"))
        try:
            p.call("set_big", 500_000)
            fd = p.hc("cchat_create")
            assert p.write_fn(fd, 5, tool_schema("big")) == 0
            assert p.set_param(fd, "max_tool_output_bytes", 1 << 20) == 0
            assert p.write_msg(fd, "user", "go") == 0
            with pytest.raises(wasmtime.WasmtimeError, match="keep more than"):
                p.hc("cchat_send", fd, abi.SEND_AUTO_TOOL_CALL)
            assert p.run.interrupt is not None and p.run.interrupt[0] == "memory_limit"
            messages = list(p.run.fds.get(fd, FdKind.CHAT_SESSION).messages)
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


# ---- tools and allocators that misbehave inside an auto send ------------------------------

ECHO, SCRIBBLE, OOB, RECURSE, SLEEPER, QUITTER, REENTER, CLOSER, MOVER, LEN_MAX, ASK_MAX, \
    SPIN, NEGATIVE_LEN, CLOBBER = range(14)
TOOL_NAMES = ["echo", "scribble", "oob", "recurse", "sleeper", "quitter", "reenter", "closer",
              "mover", "len_max", "ask_max", "spin", "negative_len", "clobber"]
# What the model reads back for the hostile call (the echo after it must always work).
TOOL_CASES = [
    ("scribble", "tool_exec_failed", "claimed"),
    ("oob", "tool_exec_failed", "memory out of bounds"),
    ("recurse", "tool_exec_failed", "call stack exhausted"),
    ("sleeper", "tool_exec_failed", "deadline"),
    ("quitter", "tool_exec_failed", "exit 3"),
    ("reenter", None, chr(ord("A") - abi.EAGAIN)),  # a send on its own session: EAGAIN
    ("closer", None, chr(ord("A") - abi.EAGAIN)),  # closing its own session: EAGAIN
    ("mover", None, '{"x":1}'),  # grew (and possibly moved) memory mid-call
    ("len_max", "tool_exec_failed", "4294967295"),
    ("ask_max", "output_too_large", "4294967295"),
    ("spin", "tool_exec_failed", "deadline"),
    ("negative_len", "tool_exec_failed", "claimed"),
    ("clobber", None, "ok"),  # wiped its own arguments: its business, not the host's
]


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
def tool_upstream(upstream: ScriptedServer) -> ScriptedServer:
    return upstream


def tool_session(p: Probe, user: str, *, mode: int = 0, arena: bool = False) -> int:
    p.call("set_mode", mode)
    fd = int(p.hc("cchat_create"))
    p.call("set_session", fd)
    for index, name in enumerate(TOOL_NAMES):
        assert p.write_fn(fd, index, tool_schema(name)) == 0
    if arena:
        assert p.set_param(fd, "tool_arena_ptr", 200_000) == 0
        assert p.set_param(fd, "tool_arena_len", 4096) == 0
    assert p.write_msg(fd, "user", user) == 0
    return fd


def auto_send(p: Probe, fd: int) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    body = p.recv_json(p.hc("cchat_send", fd, abi.SEND_AUTO_TOOL_CALL))
    session = p.run.fds.get(fd, FdKind.CHAT_SESSION)
    messages = list(session.messages)
    assert_valid_transcript(messages)
    return body, [m for m in messages if m["role"] == "tool"]


@pytest.fixture
def tool_host(tool_upstream: ScriptedServer) -> Iterator[Host]:
    h = Host(base_url=tool_upstream.base_url, model="m", max_retries=0, cache_dir=None,
             tool_timeout=0.5, timeout=HANG_GUARD_S)
    yield h
    h.close()


@pytest.mark.parametrize("arena", [False, True], ids=["allocator", "arena"])
@pytest.mark.parametrize(("tool", "code", "text"), TOOL_CASES, ids=[c[0] for c in TOOL_CASES])
def test_hostile_tool_fails_only_its_call(tool_host: Host, tool: str, code: str | None,
                                          text: str, arena: bool) -> None:
    if arena and tool == "mover":
        pytest.skip("the arena is fixed; growing memory only matters for the allocator")
    with neighbour_running(tool_host):
        p = Probe(tool_host, TOOLS)
        try:
            fd = tool_session(p, tool, arena=arena)
            body, answers = auto_send(p, fd)
            # The same instance keeps working: a second send runs the tools again.
            assert p.write_msg(fd, "user", "echo") == 0
            again, _ = auto_send(p, fd)
        finally:
            p.close()
    assert body["choices"][0]["message"]["content"] == 'final: {"y":2}'
    assert again["choices"][0]["message"]["content"] == 'final: {"y":2}'
    content = answers[0]["content"]
    if code is None:
        assert content == text
    else:
        assert json.loads(content)["error"]["code"] == code
        assert text in content
    assert answers[1]["content"] == '{"y":2}'


ALLOC_CASES = [
    (1, "returned NULL"),
    (2, "outside guest memory"),
    (3, "trapped"),
    (4, "deadline"),
    (5, "outside guest memory"),
]


@pytest.mark.parametrize(("mode", "text"), ALLOC_CASES,
                         ids=["null", "outside", "trap", "spin", "straddles-end"])
def test_hostile_allocator_fails_the_call_not_the_host(tool_host: Host, mode: int,
                                                       text: str) -> None:
    with neighbour_running(tool_host):
        p = Probe(tool_host, TOOLS)
        try:
            fd = tool_session(p, "echo", mode=mode)
            body, answers = auto_send(p, fd)
        finally:
            p.close()
    assert len(answers) == 2
    for answer in answers:
        error = json.loads(answer["content"])["error"]
        assert error["code"] == "tool_exec_failed" and text in error["message"]
    assert body["choices"][0]["message"]["content"].startswith("final: ")


def test_allocator_aliasing_and_a_trapping_free_are_survivable(tool_host: Host) -> None:
    p = Probe(tool_host, TOOLS)
    try:
        fd = tool_session(p, "scribble", mode=6)  # every block is the same 4 KiB address
        p.call("set_free_traps", 1)
        body, answers = auto_send(p, fd)
    finally:
        p.close()
    assert json.loads(answers[0]["content"])["error"]["code"] == "tool_exec_failed"
    assert answers[1]["content"] == '{"y":2}'
    assert body["choices"][0]["message"]["content"] == 'final: {"y":2}'


# ---- bad pointers and lengths, every hostcall that takes one ---------------------------

BAD = -16  # 0xFFFFFFF0: far past any memory
END = 4 * 65536  # the probe's first byte past memory


def _straddle(n: int) -> int:
    return END - n // 2


def _fixture(p: Probe, server: ScriptedServer) -> dict[str, int]:
    fd = int(p.hc("cchat_create"))
    assert p.write_msg(fd, "user", "ping") == 0
    rfd = int(p.hc("cchat_send", fd, 0))
    assert rfd >= 0
    ep = int(p.hc("spear_epoll_create"))
    assert p.hc("spear_epoll_ctl", ep, abi.EPOLL_CTL_ADD, rfd, abi.EPOLLIN) == 0
    return {"fd": fd, "rfd": rfd, "ep": ep}


def bad_pointer_calls(f: dict[str, int], ok: int, cap: int) -> list[tuple[str, tuple[int, ...],
                                                                         int]]:
    """(hostcall, args, expected) for every pointer or length parameter.
    `ok` points at valid text, `cap` at a u32 holding a generous capacity."""
    fd, rfd, ep = f["fd"], f["rfd"], f["ep"]
    calls: list[tuple[str, tuple[int, ...], int]] = [
        ("log", (2, BAD, 4), abi.EFAULT),
        ("log", (2, _straddle(64), 64), abi.EFAULT),
        ("log", (2, ok, -1), abi.EINVAL),
        ("cchat_write_msg", (fd, BAD, 4, ok, 4), abi.EFAULT),
        ("cchat_write_msg", (fd, ok, 4, BAD, 4), abi.EFAULT),
        ("cchat_write_msg", (fd, _straddle(64), 64, ok, 4), abi.EFAULT),
        ("cchat_write_msg", (fd, ok, 4, _straddle(64), 64), abi.EFAULT),
        ("cchat_write_msg", (fd, ok, -1, ok, 4), abi.EFAULT),
        ("cchat_write_msg", (fd, ok, 4, ok, -(1 << 31)), abi.EFAULT),
        ("cchat_write_fn", (fd, 0, BAD, 10), abi.EFAULT),
        ("cchat_write_fn", (fd, 0, _straddle(64), 64), abi.EFAULT),
        ("cchat_write_fn", (fd, 0, ok, -5), abi.EFAULT),
        ("cchat_ctl", (fd, abi.CTL_SET_PARAM, ok, BAD), abi.EFAULT),
        ("cchat_ctl", (fd, abi.CTL_SET_PARAM, ok, END - 2), abi.EFAULT),
        ("cchat_ctl", (fd, abi.CTL_SET_PARAM, BAD, cap), abi.EFAULT),
        ("cchat_ctl", (fd, abi.CTL_SET_PARAM, _straddle(64), cap), abi.EFAULT),
        ("cchat_ctl", (rfd, abi.CTL_GET_METRICS, BAD, cap), abi.EFAULT),
        ("cchat_ctl", (rfd, abi.CTL_GET_METRICS, ok, BAD), abi.EFAULT),
        ("cchat_ctl", (rfd, abi.CTL_GET_METRICS, END - 1, cap), abi.EFAULT),
        ("cchat_recv", (rfd, BAD, cap), abi.EFAULT),
        ("cchat_recv", (rfd, ok, BAD), abi.EFAULT),
        ("cchat_recv", (rfd, _straddle(64), cap), abi.EFAULT),
        ("cchat_recv", (rfd, ok, END - 3), abi.EFAULT),
        ("spear_epoll_wait", (ep, BAD, cap, 0), abi.EFAULT),
        ("spear_epoll_wait", (ep, ok, BAD, 0), abi.EFAULT),
        ("spear_epoll_wait", (ep, END - 4, cap, 0), abi.EFAULT),
    ]
    for cmd in (abi.FD_CTL_SET_FLAGS, abi.FD_CTL_GET_FLAGS, abi.FD_CTL_GET_KIND,
                abi.FD_CTL_GET_STATUS, abi.FD_CTL_GET_METRICS):
        calls += [("spear_fd_ctl", (rfd, cmd, ok, BAD), abi.EFAULT)]
        calls += [("spear_fd_ctl", (rfd, cmd, BAD, cap), abi.EFAULT)]
        calls += [("spear_fd_ctl", (rfd, cmd, END - 1, cap), abi.EFAULT)]
    return calls


def test_every_pointer_parameter_faults_cleanly_and_consumes_nothing(tool_upstream: Any,
                                                                     make_host: Any) -> None:
    from spearpy.hostcalls import HOSTCALLS

    host = make_host(base_url=tool_upstream.base_url)
    p = Probe(host, wat_module("probe.wat"))
    try:
        f = _fixture(p, tool_upstream)
        ok, _ = p.put(p.A, "user")
        cap = p.C
        session = p.run.fds.get(f["fd"], FdKind.CHAT_SESSION)
        before = (list(session.messages), dict(session.params), session.registry.specs())
        _, body_before = p.recv(f["rfd"])
        calls = bad_pointer_calls(f, ok, cap)
        for name, args, expected in calls:
            p.u32(cap, 1 << 20)
            p.put(p.B, json.dumps({"key": "temperature", "value": 0.5}))
            assert p.hc(name, *args) == expected, (name, args)
        # Nothing was consumed or changed by any of them.
        assert (list(session.messages), dict(session.params), session.registry.specs()) == before
        assert p.recv(f["rfd"])[1] == body_before
        assert not p.run.fds.entry(f["rfd"]).nonblock
    finally:
        p.close()
    pointer_calls = {n for n, (params, _r, _f) in HOSTCALLS.items() if len(params) >= 3}
    unsupported = {n for n in pointer_calls if n.startswith(("rtasr_", "mic_", "user_stream_"))}
    assert pointer_calls - unsupported - {"cchat_send"} <= {c[0] for c in calls} | {
        "spear_epoll_ctl"}  # epoll_ctl takes no pointer


def test_no_exported_memory_is_efault_everywhere(make_host: Any) -> None:
    wat = (ROOT / "tests/wat/probe.wat").read_text().replace(
        '(memory (export "memory") 4)', "(memory 4)")
    p = Probe(make_host(), bytes(wasmtime.wat2wasm(wat)))
    try:
        fd = p.hc("cchat_create")
        assert p.hc("log", 2, 0, 4) == abi.EFAULT
        assert p.hc("cchat_write_msg", fd, 0, 4, 8, 4) == abi.EFAULT
        assert p.hc("cchat_write_fn", fd, 0, 0, 4) == abi.EFAULT
        assert p.hc("cchat_ctl", fd, abi.CTL_SET_PARAM, 0, 8) == abi.EFAULT
        assert p.hc("spear_fd_ctl", fd, abi.FD_CTL_GET_KIND, 0, 8) == abi.EFAULT
    finally:
        p.close()


def test_json_nested_deeper_than_python_parses_is_refused_cleanly(make_host: Any) -> None:
    deep = "[" * 5000 + "]" * 5000
    p = Probe(make_host(), wat_module("probe.wat"))
    try:
        fd = p.hc("cchat_create")
        for payload, call, expected in [
            (f'{{"key":"stop","value":{deep}}}', "cchat_ctl", abi.EIO),  # a ctl payload: EIO
            (deep, "spear_fd_ctl", abi.EINVAL),
        ]:
            ptr, n = p.put(p.D, payload)
            p.u32(p.A, n)
            cmd = abi.CTL_SET_PARAM if call == "cchat_ctl" else abi.FD_CTL_SET_FLAGS
            assert p.hc(call, fd, cmd, ptr, p.A) == expected, call
        ptr, n = p.put(p.D, '{"name":"t","parameters":' + deep + "}")
        assert p.hc("cchat_write_fn", fd, 0, ptr, n) == abi.EINVAL
        assert p.write_msg(fd, "tool", '{"tool_call_id":"x","content":' + deep + "}") == abi.EINVAL
    finally:
        p.close()


def test_a_repeated_host_bug_is_logged_a_few_times_not_flooded(make_host: Any) -> None:
    import structlog

    p = Probe(make_host(), wat_module("probe.wat"))
    try:
        with structlog.testing.capture_logs() as lines:
            for _ in range(200):
                LOG_HOST_BUG(p.run, "spear.log", RuntimeError("boom"))
    finally:
        p.close()
    assert len(lines) == instance.MAX_LOGGED_HOST_BUGS
    assert p.run.host_bugs == 200
