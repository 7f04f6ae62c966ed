"""Every hostcall family, and the linker definitions they make.

A new family is a module of implementations and one entry in FAMILIES
(spearpy/hostcalls/family.py says what an entry holds). Nothing outside
this package knows a family by name: the instance runs their hooks, inspect
and module loading read their signatures here.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

from spearpy._native import I32, I64, HostFn, define_hostcall
from spearpy.hostcalls.family import Hostcall, HostcallFamily, call, call_i64, i32s, read_call

if TYPE_CHECKING:
    import wasmtime

    from spearpy.context import RunContext

WASI_MODULE: Final = "wasi_snapshot_preview1"
_WASI_EIO: Final = 29  # WASI's errno, not spear's negative one


def _has_streams(run: RunContext) -> bool:
    return run.options.streams is not None


# The chat, fd and system families stay eager: cchat_* are the hot
# hostcalls, and a first-call trampoline would add a Python call to each.
# User streams, the microphone and realtime transcription are lazy: their
# fds, queues and parsers cost ~8 ms of `spearpy run` start-up (-X
# importtime), which a guest that never calls them has no use for.
FAMILIES: Final[tuple[HostcallFamily, ...]] = (
    HostcallFamily("system", "spearpy.hostcalls.system", {
        "log": call(3),
        "time_now_ms": call_i64(outside=True),
        "wall_time_s": call_i64(outside=True),
        "random_i64": call_i64(outside=True),
        # No answer, but its wait is the world's: a replay does not wait.
        "sleep_ms": Hostcall((I32,), (), outside=True, answers_only=True),
    }),
    HostcallFamily("chat", "spearpy.hostcalls.chat", {
        "cchat_create": call(0), "cchat_write_msg": call(5), "cchat_write_fn": call(4),
        "cchat_ctl": call(4),
        # Model replies, MCP and Python tool results: journaled by the driver.
        "cchat_send": call(2, outside=True, journaled_inside=True),
        "cchat_recv": call(3), "cchat_close": call(1),
    }),
    HostcallFamily("fd", "spearpy.hostcalls.fd", {
        "spear_fd_ctl": call(4), "spear_epoll_create": call(0), "spear_epoll_ctl": call(4),
        "spear_epoll_wait": read_call(4),  # readiness
        "spear_epoll_close": call(1),
    }),
    HostcallFamily("wasi", "spearpy.hostcalls.wasi", {
        "poll_oneoff": read_call(4),
        # The i64 precision arrives as its low 32 bits; it is not used.
        "clock_time_get": Hostcall((I32, I64, I32), (I32,), outside=True, answers_only=True),
        "random_get": read_call(2),
    }, import_module=WASI_MODULE, on_error=_WASI_EIO, shadows=True),
    HostcallFamily("user_streams", "spearpy.hostcalls.streams", {
        "user_stream_open": call(2, outside=True), "user_stream_read": read_call(3),
        "user_stream_write": call(3, outside=True), "user_stream_close": call(1),
        "user_stream_ctl_open": call(0, outside=True),
        "user_stream_ctl_read": read_call(3),
    }, lazy=True, on_run_start="start_streams", on_run_end="end_streams",
        applies_to=_has_streams,
        on_replayed="spearpy.hostcalls.streams_golive:stream_replayed"),
    HostcallFamily("mic", "spearpy.hostcalls.mic", {
        "mic_create": call(0), "mic_ctl": call(4, outside=True, sets_up_fd=True),
        "mic_read": read_call(3), "mic_close": call(1),
    }, lazy=True, on_replayed="spearpy.hostcalls.audio_golive:mic_replayed"),
    HostcallFamily("rtasr", "spearpy.hostcalls.rtasr", {
        "rtasr_create": call(0), "rtasr_ctl": call(4, outside=True, sets_up_fd=True),
        "rtasr_write": call(3, outside=True), "rtasr_read": read_call(3),
        "rtasr_close": call(1),
    }, lazy=True, on_replayed="spearpy.hostcalls.audio_golive:rtasr_replayed"),
)


def _on_first_call(family: HostcallFamily, name: str) -> HostFn:
    """`family`'s `name`, imported when the guest first calls it. Two threads
    racing on the first call both find the same function: harmless."""
    target: HostFn | None = None

    def first_call(*args: Any) -> int | None:
        nonlocal target
        if target is None:
            target = getattr(importlib.import_module(family.module), name)
        return target(*args)

    return first_call


def _journaled(call: str, fn: HostFn, sets_up_fd: bool, answers_only: bool,
               replayed: Callable[[], Callable[..., Any] | None] | None,
               rc_bits: int) -> HostFn:
    """`fn`, answered from or recorded into the run's journal when it has one;
    `replayed` finds the family's hook for an answer from the journal;
    `rc_bits`: how wide a result the call returns (32 or 64)."""
    name = call.partition(".")[2]

    def journaled(run: RunContext, *args: int) -> int | None:
        journal = run.journal
        if journal is None:
            return fn(run, *args)
        from_journal = replayed is not None and journal.replaying
        rc = journal.hostcall(run, call, args, fn, sets_up_fd=sets_up_fd,
                              answers_only=answers_only, rc_bits=rc_bits)
        hook = replayed() if from_journal and replayed is not None else None
        if hook is not None:
            hook(run, name, args, rc)
        return rc

    return journaled


def _implementation(family: HostcallFamily, name: str) -> HostFn:
    fn = _on_first_call(family, name) if family.lazy else family.function(name)
    hostcall = family.calls[name]
    replayed = None if family.on_replayed is None else family.replay_hook
    # A family with a replay hook rebuilds (or refuses) its own fds at go-live;
    # the journal's own check is for those without one.
    sets_up_fd = hostcall.sets_up_fd and replayed is None
    rc_bits = 32 if hostcall.results == (I32,) else 64
    return _journaled(f"{family.name}.{name}", fn, sets_up_fd, hostcall.answers_only,
                      replayed, rc_bits) if hostcall.journaled else fn


# The `spear` module's imports: name -> (params, results, implementation).
HOSTCALLS: Final[dict[str, tuple[tuple[str, ...], tuple[str, ...], HostFn]]] = {
    name: (hc.params, hc.results, _implementation(family, name))
    for family in FAMILIES if not family.shadows for name, hc in family.calls.items()
}


def define_spear_imports(linker: wasmtime.Linker) -> None:
    """Every family's imports (call after `define_wasi`: the WASI calls
    spearpy implements itself shadow wasmtime's)."""
    for family in FAMILIES:
        linker.allow_shadowing = family.shadows
        try:
            for name, hc in family.calls.items():
                fn = HOSTCALLS[name][2] if not family.shadows else _implementation(family, name)
                define_hostcall(linker, family.import_module, name, hc.params, hc.results,
                                fn, family.on_error)
        finally:
            linker.allow_shadowing = False


def run_started(run: RunContext) -> None:
    for family in FAMILIES:
        family.run_hook(family.on_run_start, run)


def run_ended(run: RunContext) -> None:
    for family in FAMILIES:
        family.run_hook(family.on_run_end, run)


__all__ = ["FAMILIES", "HOSTCALLS", "WASI_MODULE", "HostcallFamily", "define_spear_imports",
           "i32s", "run_ended", "run_started"]
