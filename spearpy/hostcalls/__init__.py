"""The `spear` import module: every hostcall with its exact wasm signature."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any, Final

from spearpy import abi
from spearpy._native import I32, I64, HostFn, define_hostcall
from spearpy.hostcalls import chat, fd, system, wasi_poll

if TYPE_CHECKING:
    import wasmtime

# Families a guest may never call, imported at their first call: user
# streams, the microphone and realtime transcription pull in their fds,
# queues and parsers (~8 ms of `spearpy run` start-up, -X importtime), which
# a guest that never opens such an fd has no use for. Name -> param count
# (all i32, one i32 result); each module's *_HOSTCALLS table holds the
# functions, and tests/test_startup.py checks that the two agree. The chat
# family stays eager: cchat_* are the hot hostcalls, and a trampoline would
# add a Python call to every one of them.
_DEFERRED: Final[dict[str, dict[str, int]]] = {
    "spearpy.hostcalls.streams": {
        "user_stream_open": 2, "user_stream_read": 3, "user_stream_write": 3,
        "user_stream_close": 1, "user_stream_ctl_open": 0, "user_stream_ctl_read": 3,
    },
    "spearpy.hostcalls.mic": {"mic_create": 0, "mic_ctl": 4, "mic_read": 3, "mic_close": 1},
    "spearpy.hostcalls.rtasr": {
        "rtasr_create": 0, "rtasr_ctl": 4, "rtasr_write": 3, "rtasr_read": 3, "rtasr_close": 1,
    },
}


def _on_first_call(module: str, name: str) -> HostFn:
    """`module.name`, imported when the guest first calls it. Two threads
    racing on the first call both find the same function: harmless."""
    target: HostFn | None = None

    def call(*args: Any) -> int | None:
        nonlocal target
        if target is None:
            target = getattr(importlib.import_module(module), name)
        return target(*args)

    return call


def _i32s(n: int) -> tuple[str, ...]:
    return (I32,) * n


# name -> (params, results, implementation)
HOSTCALLS: Final[dict[str, tuple[tuple[str, ...], tuple[str, ...], HostFn]]] = {
    "log": (_i32s(3), (I32,), system.log),
    "time_now_ms": ((), (I64,), system.time_now_ms),
    "wall_time_s": ((), (I64,), system.wall_time_s),
    "random_i64": ((), (I64,), system.random_i64),
    "sleep_ms": ((I32,), (), system.sleep_ms),
    "cchat_create": ((), (I32,), chat.cchat_create),
    "cchat_write_msg": (_i32s(5), (I32,), chat.cchat_write_msg),
    "cchat_write_fn": (_i32s(4), (I32,), chat.cchat_write_fn),
    "cchat_ctl": (_i32s(4), (I32,), chat.cchat_ctl),
    "cchat_send": (_i32s(2), (I32,), chat.cchat_send),
    "cchat_recv": (_i32s(3), (I32,), chat.cchat_recv),
    "cchat_close": (_i32s(1), (I32,), chat.cchat_close),
    "spear_fd_ctl": (_i32s(4), (I32,), fd.spear_fd_ctl),
    "spear_epoll_create": ((), (I32,), fd.spear_epoll_create),
    "spear_epoll_ctl": (_i32s(4), (I32,), fd.spear_epoll_ctl),
    "spear_epoll_wait": (_i32s(4), (I32,), fd.spear_epoll_wait),
    "spear_epoll_close": (_i32s(1), (I32,), fd.spear_epoll_close),
}


for _module, _family in _DEFERRED.items():
    for _name, _nparams in _family.items():
        HOSTCALLS[_name] = (_i32s(_nparams), (I32,), _on_first_call(_module, _name))


def define_spear_imports(linker: wasmtime.Linker) -> None:
    """The `spear` module, and the WASI calls spearpy implements itself
    (call after `define_wasi`: these shadow wasmtime's)."""
    for name, (params, results, fn) in HOSTCALLS.items():
        define_hostcall(linker, abi.IMPORT_MODULE, name, params, results, fn, abi.EIO)
    linker.allow_shadowing = True
    try:
        define_hostcall(linker, wasi_poll.WASI_MODULE, "poll_oneoff", _i32s(4), (I32,),
                        wasi_poll.poll_oneoff, wasi_poll.EIO)
        # The i64 precision arrives as its low 32 bits; it is not used.
        define_hostcall(linker, wasi_poll.WASI_MODULE, "clock_time_get", (I32, I64, I32),
                        (I32,), wasi_poll.clock_time_get, wasi_poll.EIO)
    finally:
        linker.allow_shadowing = False
