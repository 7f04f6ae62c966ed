"""The `spear` import module: every hostcall with its exact wasm signature."""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from spearpy import abi
from spearpy._native import I32, I64, HostFn, define_hostcall
from spearpy.hostcalls import chat, fd, system, wasi_poll
from spearpy.hostcalls.mic import MIC_HOSTCALLS
from spearpy.hostcalls.rtasr import RTASR_HOSTCALLS
from spearpy.hostcalls.streams import STREAM_HOSTCALLS

if TYPE_CHECKING:
    import wasmtime


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


for _name, (_nparams, _fn) in (STREAM_HOSTCALLS | MIC_HOSTCALLS | RTASR_HOSTCALLS).items():
    HOSTCALLS[_name] = (_i32s(_nparams), (I32,), _fn)


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
