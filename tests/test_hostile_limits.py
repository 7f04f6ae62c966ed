"""Limits hold inside one hostcall (issue 14, item 6).

A 150 MB tool schema passed to cchat_write_fn under `--timeout 3
--max-host-bytes 16MiB` used to run for many seconds and take gigabytes:
every hostcall read whatever length it was given, and the budget and the
deadline were only looked at afterwards. Now each hostcall checks bounds,
then its size cap, then the run's byte budget, and only then reads; JSON is
charged at what the host keeps once parsed; and the schema checks run under
the run's deadline and cancel.

The attacks run in processes of their own under RLIMIT_DATA 1 GiB
(tests/limits_attack.py): each must end quickly with the right errno or
outcome, and the process's peak RSS must stay within a small margin of the
guest's own memory.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import wasmtime

from spearpy import abi
from spearpy.errors import HostInterrupt
from spearpy.fds import ChatSessionFd
from spearpy.host import Host
from spearpy.hostcalls.limits import (
    PARSED_BYTES_PER_TOKEN,
    SCHEMA_BYTES_PER_TOKEN,
    bounded,
    json_cost,
)
from spearpy.instance import TOOL_FUNC_BYTES
from spearpy.interrupts import Interrupts
from spearpy.memory import GuestMemory
from tests.limits_attack import TIMEOUT_S, draft4_enum_schema
from tests.probe import Probe, wat_module

ROOT = Path(__file__).resolve().parents[1]
GUEST = wat_module("hostile_limits.wat")
# Python, wasmtime and spearpy take ~60 MB; copies of a 150 MB payload, or
# objects parsed from it, take hundreds.
HOST_OVERHEAD_LIMIT = 128 << 20
QUICK_S = 2.5  # building the 150 MB payload in the guest included
BAD = 0x7FFF0000  # an address far outside the guest's memory

pytestmark = pytest.mark.usefixtures("no_host_bugs")


# ---- the attacks, each in a process of its own -----------------------------

ATTACKS = [
    # (attack, hostcall result or None, interrupt outcome or None, time limit)
    ("schema", abi.EINVAL, None, QUICK_S),
    ("message", None, "memory_limit", QUICK_S),
    ("tool_answer", abi.EINVAL, None, QUICK_S),
    ("param", abi.EINVAL, None, QUICK_S),
    ("flags", abi.EINVAL, None, QUICK_S),
    ("log", abi.EINVAL, None, QUICK_S),
    ("slow_schema", None, "timeout", TIMEOUT_S + 1.5),
    ("cancelled_schema", None, "cancelled", QUICK_S),
    ("amplified_schemas", None, "memory_limit", QUICK_S),
]


@pytest.mark.skipif(sys.platform != "linux", reason="RLIMIT_DATA and /proc/self/status")
@pytest.mark.parametrize(("attack", "result", "outcome", "limit_s"), ATTACKS,
                         ids=[a[0] for a in ATTACKS])
def test_an_attack_ends_quickly_and_small(attack: str, result: int | None, outcome: str | None,
                                          limit_s: float) -> None:
    try:
        proc = subprocess.run([sys.executable, "-m", "tests.limits_attack", attack], cwd=ROOT,
                              capture_output=True, text=True, timeout=90)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{attack}: still running after 90 s")
    assert proc.returncode == 0, proc.stderr[-3000:]
    report: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["host_bugs"] == []
    if outcome is None:
        assert report["trap"] is None, report
        assert report["result"] == result, report
    else:
        assert report["interrupt"] is not None and report["interrupt"][0] == outcome, report
    assert report["elapsed"] < limit_s, report
    overhead = report["peak_rss"] - report["guest_memory"]
    assert overhead < HOST_OVERHEAD_LIMIT, f"{attack}: the host took {overhead >> 20} MiB"


# ---- the order of checks, in process ------------------------------------------


@pytest.fixture
def probe(make_host: Any, make_probe: Callable[..., Probe]) -> Any:
    def make(**config: Any) -> Probe:
        return make_probe(make_host(**config), GUEST)

    return make


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Lengths of every read hostcalls make from guest memory."""
    seen: list[int] = []
    read, read_pair = GuestMemory.read, GuestMemory.read_pair

    def record(self: GuestMemory, ptr: int, length: int) -> bytes:
        seen.append(length)
        return read(self, ptr, length)

    def record_pair(self: GuestMemory, p1: int, n1: int, p2: int, n2: int) -> tuple[bytes, bytes]:
        seen.extend((n1, n2))
        return read_pair(self, p1, n1, p2, n2)

    monkeypatch.setattr(GuestMemory, "read", record)
    monkeypatch.setattr(GuestMemory, "read_pair", record_pair)
    return seen


def _room(p: Probe, nbytes: int) -> int:
    """Grow the guest so `nbytes` fit past 64 KiB; returns where they start."""
    pages = (65536 + nbytes) // 65536 + 1 - p.run.memory.size() // 65536
    if pages > 0:
        assert p.call("grow", pages) >= 0
    return 65536


def _schema_of_size(size: int) -> bytes:
    head, tail = b'{"name":"exact","description":"', b'"}'
    return head + b"d" * (size - len(head) - len(tail)) + tail


def test_sizes_are_refused_after_the_bounds_and_before_any_read(probe: Any,
                                                                reads: list[int]) -> None:
    p = probe()
    fd = int(p.hc("cchat_create"))
    over = abi.MAX_TOOL_SCHEMA_BYTES + 1
    ptr = _room(p, abi.MAX_TOOL_ANSWER_BYTES + 1)
    p.u32(128, over)
    p.u32(132, abi.MAX_FD_FLAGS_BYTES + 1)
    role = p.put(256, "user")[0]
    tool = p.put(264, "tool")[0]
    reads.clear()
    # Bounds first: a length past the end of memory is EFAULT, whatever its size.
    assert p.hc("cchat_write_fn", fd, 0, BAD, over) == abi.EFAULT
    assert p.hc("cchat_ctl", fd, abi.CTL_SET_PARAM, BAD, 128) == abi.EFAULT
    assert p.hc("spear_fd_ctl", fd, abi.FD_CTL_SET_FLAGS, BAD, 132) == abi.EFAULT
    assert p.hc("cchat_write_msg", fd, BAD, 64, ptr, 4) == abi.EFAULT
    assert p.hc("cchat_write_msg", fd, tool, 4, BAD, abi.MAX_TOOL_ANSWER_BYTES + 1) \
        == abi.EFAULT
    # Then the size caps, with nothing of the payload read.
    assert p.hc("cchat_write_fn", fd, 0, ptr, over) == abi.EINVAL
    p.u32(128, abi.MAX_PARAM_BYTES + 1)
    assert p.hc("cchat_ctl", fd, abi.CTL_SET_PARAM, ptr, 128) == abi.EINVAL
    assert p.hc("spear_fd_ctl", fd, abi.FD_CTL_SET_FLAGS, ptr, 132) == abi.EINVAL
    assert p.hc("cchat_write_msg", fd, ptr, 10, ptr, 4) == abi.EINVAL  # no role is 10 bytes
    assert p.hc("cchat_write_msg", fd, tool, 4, ptr, abi.MAX_TOOL_ANSWER_BYTES + 1) == abi.EINVAL
    assert p.hc("log", 2, ptr, abi.MAX_LOG_LEN + 1) == abi.EINVAL
    assert max(reads, default=0) <= len("tool")
    assert p.run.host_bytes == ChatSessionFd.host_bytes  # the open session alone
    # A long message of another role is only a matter of budget.
    assert p.hc("cchat_write_msg", fd, role, 4, ptr, abi.MAX_TOOL_ANSWER_BYTES + 1) == 0
    # A schema of exactly the cap is accepted.
    exact = _schema_of_size(abi.MAX_TOOL_SCHEMA_BYTES)
    p.put(ptr, exact)
    assert p.hc("cchat_write_fn", fd, 0, ptr, len(exact)) == 0


def test_the_budget_refuses_before_reading(probe: Any, reads: list[int]) -> None:
    p = probe(max_host_bytes=1 << 20)
    fd = int(p.hc("cchat_create"))
    ptr = _room(p, 2 << 20)
    role = p.put(256, "user")[0]
    reads.clear()
    # A bad pointer is still EFAULT, not the end of the run.
    assert p.hc("cchat_write_msg", fd, role, 4, BAD, 2 << 20) == abi.EFAULT
    with pytest.raises(wasmtime.WasmtimeError, match="max_host_bytes"):
        p.hc("cchat_write_msg", fd, role, 4, ptr, 2 << 20)
    assert p.run.interrupts.noted is not None and p.run.interrupts.noted[0] == "memory_limit"
    assert max(reads, default=0) <= len("user")
    assert p.run.host_bytes == ChatSessionFd.host_bytes  # the open session alone


def test_the_log_budget_is_checked_after_the_bounds(probe: Any, reads: list[int]) -> None:
    p = probe(max_log_bytes=100)
    ptr = p.put(65536 - 200, "x" * 200)[0]
    assert p.hc("log", 2, ptr, 60) == 0
    reads.clear()
    assert p.hc("log", 2, BAD, 60) == abi.EFAULT
    with pytest.raises(wasmtime.WasmtimeError, match="max_log_bytes"):
        p.hc("log", 2, ptr, 60)
    assert reads == []


def test_json_is_charged_at_what_the_host_keeps(probe: Any) -> None:
    p = probe()
    fd = int(p.hc("cchat_create"))
    schema = json.dumps({"name": "t", "parameters": {"type": "object", "properties": {
        "a": {"type": "array", "items": {"type": "string"}}}}}).encode()
    ptr, n = p.put(1024, schema)
    assert p.hc("cchat_write_fn", fd, 0, ptr, n) == 0
    # With the open session and tool_function's cache entry for slot 0.
    assert p.run.host_bytes == json_cost(schema, SCHEMA_BYTES_PER_TOKEN) + \
        ChatSessionFd.host_bytes + TOOL_FUNC_BYTES
    charged = p.run.host_bytes
    param = b'{"key":"stop","value":["a","b","c"]}'
    ptr, n = p.put(4096, param)
    p.u32(128, n)
    assert p.hc("cchat_ctl", fd, abi.CTL_SET_PARAM, ptr, 128) == 0
    assert p.run.host_bytes - charged == json_cost(param)
    # Refused writes cost nothing.
    for bad in (b'{"name":"t"', b'{"name":"bad name!"}'):
        ptr, n = p.put(1024, bad)
        assert p.hc("cchat_write_fn", fd, 0, ptr, n) == abi.EINVAL
    assert p.run.host_bytes - charged == json_cost(param)


def test_json_cost_counts_tokens() -> None:
    assert json_cost(b"") == 0
    assert json_cost(b'"abc"') == 5
    assert json_cost(b'{"a":[1,2]}') == 11 + 4 * PARSED_BYTES_PER_TOKEN
    assert json_cost(b"[{},{}]", 7) == 7 + 4 * 7


def test_a_schema_check_stops_at_the_deadline_in_process(probe: Any) -> None:
    p = probe(timeout=0.5)
    fd = int(p.hc("cchat_create"))
    raw = draft4_enum_schema(3000)  # ~25 s of jsonschema without a deadline
    ptr = _room(p, len(raw))
    p.put(ptr, raw)
    started = time.monotonic()
    with pytest.raises(wasmtime.WasmtimeError, match="deadline"):
        p.hc("cchat_write_fn", fd, 0, ptr, len(raw))
    # Unstopped, the check runs ~25 s; stopped, it ends near the 0.5 s
    # deadline. 8 s tells the two apart with room for a loaded 2-core machine.
    assert time.monotonic() - started < 8
    assert p.run.interrupts.noted is not None and p.run.interrupts.noted[0] == "timeout"
    assert sys.gettrace() is None or "coverage" in type(sys.gettrace()).__module__


# ---- bounded() itself -----------------------------------------------------------


class _Run:
    """What bounded() asks of a GuestRun: its real Interrupts."""

    def __init__(self, seconds: float | None) -> None:
        self.interrupts = Interrupts(timeout=seconds, tool_timeout=None)


def _spin() -> int:
    def step(x: int) -> int:
        return x + 1

    total = 0
    while True:
        total = step(total)
        # A generator finalised mid-work: what a raise from a trace hook
        # cannot interrupt (the exception would be printed and dropped).
        any(True for _ in range(3))


def test_bounded_stops_python_work_and_leaves_nothing_behind() -> None:
    before = sys.gettrace()
    started = time.monotonic()
    with pytest.raises(HostInterrupt) as stopped:
        bounded(_Run(0.05), _spin)  # type: ignore[arg-type]
    assert stopped.value.outcome == "timeout"
    # Unstopped, _spin never ends; a hundred times the 0.05 s budget is
    # room enough for a loaded machine and still a bound.
    assert time.monotonic() - started < 5
    assert sys.gettrace() is before
    # Nothing pending surfaces later, and calls are traced no more.
    assert sum(len(str(i)) for i in range(100_000)) > 0
    assert bounded(_Run(None), lambda: 42) == 42  # type: ignore[arg-type]


def test_bounded_stops_at_cancel() -> None:
    run = _Run(None)
    threading.Timer(0.05, run.interrupts.cancel_event.set).start()
    with pytest.raises(HostInterrupt) as stopped:
        bounded(run, _spin)  # type: ignore[arg-type]
    assert stopped.value.outcome == "cancelled"


def test_bounded_keeps_an_outer_trace_hook_working() -> None:
    seen: list[str] = []

    def outer(frame: Any, event: str, arg: Any) -> Any:
        if event == "call":
            seen.append(frame.f_code.co_name)
        return None

    def marked() -> int:
        return 7

    previous = sys.gettrace()
    sys.settrace(outer)
    try:
        assert bounded(_Run(10), marked) == 7  # type: ignore[arg-type]
        assert sys.gettrace() is outer
    finally:
        sys.settrace(previous)
    assert "marked" in seen


def test_bounded_refuses_to_start_past_the_deadline() -> None:
    called: list[bool] = []
    with pytest.raises(HostInterrupt):
        bounded(_Run(-1), lambda: called.append(True))  # type: ignore[arg-type]
    assert called == []


def test_the_host_keeps_serving_other_runs_after_a_stopped_schema(make_host: Any) -> None:
    # The stopped check leaves no state behind that breaks the next run.
    host: Host = make_host(timeout=0.3)
    p = Probe(host, GUEST)
    try:
        fd = int(p.hc("cchat_create"))
        raw = draft4_enum_schema(3000)
        ptr = _room(p, len(raw))
        p.put(ptr, raw)
        with pytest.raises(wasmtime.WasmtimeError):
            p.hc("cchat_write_fn", fd, 0, ptr, len(raw))
    finally:
        p.close()
    q = Probe(host, GUEST)
    try:
        fd = int(q.hc("cchat_create"))
        ok = json.dumps({"name": "t", "parameters": {"type": "object"}}).encode()
        ptr, n = q.put(1024, ok)
        assert q.hc("cchat_write_fn", fd, 0, ptr, n) == 0
    finally:
        q.close()
