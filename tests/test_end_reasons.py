"""Which reason ends a run when several meet (docs/abi.md, "Which reason wins").

The first run-ending reason the host notes wins; a later one never
overwrites it. Each reason is caused through its real path on a live guest
(a hostcall over a budget, a cancel from another thread as Host.close sends
it, the embedder's cancel event, the run deadline), in both orders for every
pair that can race. The exceptions the docs spell out are tested by name.
"""

from __future__ import annotations

import contextlib
import itertools
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import wasmtime

from spearpy.endings import classify_error, classify_trap
from spearpy.host import Host
from spearpy.outcome import Outcome
from tests.probe import Probe, wat_module

PROBE = wat_module("probe.wat")
BUDGET = 1 << 20  # max_host_bytes (its minimum)
LOG_BUDGET = 10  # max_log_bytes


def _over_host_bytes(p: Probe) -> None:
    fd = int(p.hc("cchat_create"))
    ptr = int(p.call("spear_alloc", BUDGET + 64))  # grows the guest: the range is in bounds
    p.put(256, "user")
    p.hc("cchat_write_msg", fd, 256, 4, ptr, BUDGET + 1)


def _over_log_bytes(p: Probe) -> None:
    p.put(512, "x" * (LOG_BUDGET + 1))
    p.hc("log", 2, 512, LOG_BUDGET + 1)


def _host_closing(p: Probe) -> None:
    # What Host.close (and an MCP server's bridge) does from another thread.
    worker = threading.Thread(target=p.run.interrupts.cancel,
                              args=("cancelled", "the Host was closed during the run"))
    worker.start()
    worker.join()


def _embedder_cancel(p: Probe) -> None:
    p.run.interrupts.cancel_event.set()  # noted when the guest next ticks or waits
    p.hc("sleep_ms", 50)


def _deadline(p: Probe) -> None:
    p.run.interrupts.deadline = time.monotonic() - 0.001
    p.hc("sleep_ms", 50)


# name -> (what causes it, the outcome it notes)
REASONS: dict[str, tuple[Callable[[Probe], None], Outcome]] = {
    "memory_limit": (_over_host_bytes, Outcome.MEMORY_LIMIT),
    "log_limit": (_over_log_bytes, Outcome.LOG_LIMIT),
    "host_close": (_host_closing, Outcome.CANCELLED),
    "cancel_event": (_embedder_cancel, Outcome.CANCELLED),
    "timeout": (_deadline, Outcome.TIMEOUT),
}
PAIRS = [(a, b) for a, b in itertools.permutations(REASONS, 2)
         if REASONS[a][1] is not REASONS[b][1]]


@pytest.fixture
def live() -> Iterator[Probe]:
    host = Host(cache_dir=None, model="m", base_url="http://127.0.0.1:9/v1",
                max_host_bytes=BUDGET, max_log_bytes=LOG_BUDGET)
    p = Probe(host, PROBE)
    yield p
    p.close()
    host.close()


def _cause(p: Probe, name: str) -> None:
    """Cause `name`; a reason that ends the run traps the guest call."""
    with contextlib.suppress(wasmtime.WasmtimeError):
        REASONS[name][0](p)


def _ending(p: Probe) -> tuple[Outcome, str]:
    """How the run ends now: a guest call traps, classified as Host.run does."""
    try:
        p.hc("sleep_ms", 1)
    except wasmtime.Trap as exc:
        return classify_trap(exc.trap_code, exc.message, p.run.interrupts.noted,
                             p.run.config, p.run.memory)
    except wasmtime.WasmtimeError as exc:  # a hostcall's HostInterrupt
        return classify_error(str(exc), p.run.interrupts.noted, p.run.config)
    raise AssertionError("the run goes on after its reasons to end")


def _first(reason: tuple[Outcome, str] | None) -> Outcome | None:
    return None if reason is None else reason[0]


@pytest.mark.parametrize(("first", "second"), PAIRS, ids=[f"{a}-then-{b}" for a, b in PAIRS])
def test_the_first_reason_wins(live: Probe, first: str, second: str) -> None:
    _cause(live, first)
    assert live.run.interrupts.noted is not None
    assert live.run.interrupts.noted[0] is REASONS[first][1]
    _cause(live, second)
    outcome, _message = _ending(live)
    assert outcome is REASONS[first][1], f"{second} overwrote {first}"


def test_cancel_and_deadline_in_force_at_once_is_cancelled(live: Probe) -> None:
    """Exception: with nothing noted yet, one check finds both; the cancel was
    asked for, and would be reported the same had the deadline been later."""
    live.run.interrupts.deadline = time.monotonic() - 1.0
    live.run.interrupts.cancel_event.set()
    assert _ending(live)[0] is Outcome.CANCELLED


@pytest.mark.parametrize("reason", list(REASONS))
def test_a_tool_timeout_never_ends_the_run(live: Probe, reason: str) -> None:
    """Exception: tool_timeout fails one tool call. It is not noted as the
    run's reason, a run reason in force wins over it, and one coming after
    it ends the run."""
    stops = live.run.interrupts
    stops.tool_timeout = 0.001
    assert stops.arm_tool()
    stops.tool_deadline = time.monotonic() - 0.001
    assert _first(stops.reason()) is Outcome.TOOL_TIMEOUT
    stops.note(Outcome.TOOL_TIMEOUT, "the tool exceeded its deadline")
    assert stops.noted is None and stops.take_tool_timeout() is not None
    _cause(live, reason)
    assert _first(stops.reason()) is REASONS[reason][1]
    stops.disarm_tool()
    assert _ending(live)[0] is REASONS[reason][1]


TRAPS: dict[str, tuple[wasmtime.TrapCode | None, str]] = {
    "fuel": (wasmtime.TrapCode.OUT_OF_FUEL, "all fuel consumed"),
    "unreachable": (wasmtime.TrapCode.UNREACHABLE, "wasm trap: unreachable"),
    "stack": (wasmtime.TrapCode.STACK_OVERFLOW, "call stack exhausted"),
    "no_code": (None, "error while executing"),
}


@pytest.mark.parametrize("trap", list(TRAPS))
@pytest.mark.parametrize("reason", list(REASONS))
def test_a_noted_reason_wins_over_what_the_trap_looks_like(live: Probe, reason: str,
                                                           trap: str) -> None:
    """A trap the host caused is reported as the host's reason, never as the
    trap (or fuel, or memory near its limit) it looks like."""
    _cause(live, reason)
    noted = live.run.interrupts.noted
    code, text = TRAPS[trap]
    assert classify_trap(code, text, noted, live.run.config, live.run.memory) == noted
    assert classify_error(f"{text}: fuel", noted, live.run.config) == noted


def test_with_nothing_noted_the_trap_decides(live: Any) -> None:
    config, memory = live.run.config, live.run.memory
    assert classify_trap(wasmtime.TrapCode.OUT_OF_FUEL, "", None, config, memory)[0] \
        is Outcome.FUEL_EXHAUSTED
    assert classify_trap(wasmtime.TrapCode.UNREACHABLE, "wasm trap: unreachable", None,
                         config, memory)[0] is Outcome.TRAP
