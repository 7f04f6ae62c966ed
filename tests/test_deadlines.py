"""A deadline bounds the time, not just the outcome.

Each wait a guest can make (spinning wasm, sleep_ms, WASI's clock poll,
spear_epoll_wait with a timeout, a send to an upstream that never answers,
a tool that spins) is given a minute and the run (or the tool) a fraction
of a second. The run must end with the deadline's outcome AND within the
deadline plus SLACK_S. The slack is generous on purpose (a loaded 2-core CI
machine); the bug it guards against is a wait of 60 s, which an outcome-only
check passes (the deadline is noted once the long wait ends).
"""

from __future__ import annotations

import json
import struct
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
import wasmtime

from spearpy import abi
from spearpy.host import Host
from spearpy.outcome import Outcome
from tests.probe import Probe, tool_schema, wat_module

SLACK_S = 2.0
DEADLINE_S = 0.4
LONG_MS = 60_000  # what each wait asks for
WASI = wat_module("wasi.wat")
PROBE = wat_module("probe.wat")
POLL = wat_module("hostile_wasi.wat")
SPIN_TOOL = 7  # probe.wat's table[7]


def _timed(action: Callable[[], Any]) -> tuple[Any, float]:
    """(what `action` returned or raised, when it ended)."""
    try:
        result = action()
    except wasmtime.WasmtimeError as exc:
        result = exc
    return result, time.monotonic()


def _assert_ended_at(ended: float, deadline: float) -> None:
    """`deadline`: the monotonic time the run's (or the tool's) deadline fell."""
    assert ended < deadline + SLACK_S, f"ended {ended - deadline:.1f} s past the deadline"
    # And not before it: the deadline, not something else, ended the wait.
    assert ended >= deadline, f"ended {deadline - ended:.2f} s before the deadline"


def _run_deadline(p: Probe) -> float:
    deadline = p.run.interrupts.deadline
    assert deadline is not None
    return deadline


@pytest.mark.parametrize("entry", ["spin", "nap"])
def test_a_whole_run_ends_at_its_deadline(make_host: Any, entry: str) -> None:
    host = make_host(timeout=DEADLINE_S)
    started = time.monotonic()
    result, ended = _timed(lambda: host.run(WASI, invoke=entry))
    assert (result.outcome, result.exit_code) == ("timeout", 124), result.message
    _assert_ended_at(ended, started + DEADLINE_S)


@pytest.fixture
def live(make_host: Any, make_probe: Callable[..., Probe]) -> Callable[..., Probe]:
    """live(wasm, **config) -> a guest whose run has `config`'s deadline."""

    def make(wasm: bytes, **config: Any) -> Probe:
        config.setdefault("timeout", DEADLINE_S)
        config.setdefault("base_url", "http://127.0.0.1:9/v1")
        return make_probe(make_host(**config), wasm)

    return make


def _ended_by_deadline(p: Probe, result: Any) -> None:
    assert isinstance(result, wasmtime.WasmtimeError), result
    noted = p.run.interrupts.noted
    assert noted is not None and noted[0] is Outcome.TIMEOUT, noted


def test_a_wasi_clock_poll_ends_at_the_deadline(live: Callable[..., Probe]) -> None:
    """C sleep() and Rust thread::sleep: poll_oneoff on a relative clock."""
    p = live(POLL)
    p.put(1024, struct.pack("<QB7xIxxxxQQH6x", 7, 0, 1, LONG_MS * 1_000_000, 0, 0))
    result, ended = _timed(lambda: p.hc("poll_oneoff", 1024, 2048, 1, 4096))
    _ended_by_deadline(p, result)
    _assert_ended_at(ended, _run_deadline(p))


def test_an_epoll_wait_ends_at_the_deadline(live: Callable[..., Probe]) -> None:
    p = live(PROBE)
    epfd = int(p.hc("spear_epoll_create"))
    assert epfd >= abi.FIRST_FD
    p.u32(p.A, 64)
    result, ended = _timed(lambda: p.hc("spear_epoll_wait", epfd, p.D, p.A, LONG_MS))
    _ended_by_deadline(p, result)
    _assert_ended_at(ended, _run_deadline(p))


def _session(p: Probe) -> int:
    fd = int(p.hc("cchat_create"))
    assert p.write_fn(fd, SPIN_TOOL, tool_schema("spin")) == 0
    assert p.write_msg(fd, "user", "go") == 0
    return fd


def test_a_send_to_a_stalled_upstream_ends_at_the_deadline(live: Callable[..., Probe],
                                                           scripted: Any) -> None:
    server = scripted({"default": {"content": "too late", "delay_ms": LONG_MS}})
    p = live(PROBE, base_url=server.base_url, request_timeout=LONG_MS / 1000)
    fd = _session(p)
    result, ended = _timed(lambda: p.hc("cchat_send", fd, 0))
    _ended_by_deadline(p, result)
    _assert_ended_at(ended, _run_deadline(p))


def test_a_spinning_tool_ends_at_the_run_deadline(live: Callable[..., Probe],
                                                  scripted: Any) -> None:
    server = scripted({"rules": [{"reply": {"tool_calls": [{"name": "spin", "arguments": {}}]}}]})
    p = live(PROBE, base_url=server.base_url)
    fd = _session(p)
    result, ended = _timed(lambda: p.hc("cchat_send", fd, abi.SEND_AUTO_TOOL_CALL))
    _ended_by_deadline(p, result)
    _assert_ended_at(ended, _run_deadline(p))


def test_a_spinning_tool_ends_at_its_tool_deadline(live: Callable[..., Probe],
                                                   scripted: Any) -> None:
    """The tool's deadline fails that call only; the send goes on and ends."""
    server = scripted({"rules": [{"when": {"no_tool_message": True},
                                  "reply": {"tool_calls": [{"name": "spin", "arguments": {}}]}}],
                       "default": {"content": "done"}})
    p = live(PROBE, base_url=server.base_url, timeout=None, tool_timeout=DEADLINE_S)
    fd = _session(p)
    started = time.monotonic()
    rfd, ended = _timed(lambda: p.hc("cchat_send", fd, abi.SEND_AUTO_TOOL_CALL))
    assert isinstance(rfd, int) and rfd >= 0, rfd
    assert p.recv_json(rfd)["choices"][0]["message"]["content"] == "done"
    tool = next(m for m in server.requests[-1].body["messages"] if m["role"] == "tool")
    assert "deadline" in json.loads(tool["content"])["error"]["message"]
    _assert_ended_at(ended, started + DEADLINE_S)


def test_a_cancel_ends_a_long_wait_at_once(make_host: Any) -> None:
    """Not a deadline, the same waits: a cancel from another thread."""
    cancel = threading.Event()
    host: Host = make_host()
    started = time.monotonic()
    timer = threading.Timer(DEADLINE_S, cancel.set)
    timer.start()
    try:
        result, ended = _timed(lambda: host.run(WASI, invoke="nap", cancel=cancel))
    finally:
        timer.cancel()
    assert result.outcome == "cancelled", result.message
    _assert_ended_at(ended, started + DEADLINE_S)
