"""The thin layer over wasmtime's C API that spearpy's hot paths go through.

wasmtime-py's generic `Func.__call__` and `Linker.define_func` convert every
value through `Val` objects and route Python exceptions through a single
process-global slot, which is both slow (~20 us a call) and unsafe when several
threads run guests at once. Hostcalls and guest tool calls therefore use the
"unchecked" entry points with raw value arrays, and each run keeps its own
record of why it interrupted the guest.
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

from wasmtime import _ffi as ffi

if TYPE_CHECKING:
    import wasmtime

    from spearpy.instance import GuestRun

I32: Final = "i32"
I64: Final = "i64"

_VAL_RAW = ffi.wasmtime_val_raw_t
_CALLBACK_T = ffi.wasmtime_func_unchecked_callback_t
_NO_FINALIZER = ctypes.cast(0, ctypes.CFUNCTYPE(None, ctypes.c_void_p))
# ctypes callback objects must outlive every linker that points at them.
_KEEP_ALIVE: list[object] = []

_current = threading.local()


def current_run() -> GuestRun:
    """The run whose guest is executing on this thread (set around every entry)."""
    run: GuestRun = _current.run
    return run


def enter_run(run: GuestRun | None) -> GuestRun | None:
    """Make `run` current on this thread, returning the previous one."""
    previous: GuestRun | None = getattr(_current, "run", None)
    _current.run = run
    return previous


class HostInterrupt(Exception):
    """Raised inside a hostcall to end the guest with a trap (deadline, cancel, limits)."""

    def __init__(self, outcome: str, message: str) -> None:
        super().__init__(message)
        self.outcome = outcome
        self.message = message


def trap_pointer(message: str) -> int:
    raw = message.encode("utf-8", "replace")
    trap = ffi.wasmtime_trap_new(ctypes.c_char_p(raw), len(raw))
    value: int = ctypes.cast(trap, ctypes.c_void_p).value or 0
    return value


def _functype(params: tuple[str, ...], results: tuple[str, ...]) -> Any:
    import wasmtime

    kinds = {I32: wasmtime.ValType.i32(), I64: wasmtime.ValType.i64()}
    return wasmtime.FuncType([kinds[p] for p in params], [kinds[r] for r in results])


HostFn = Callable[..., int | None]


def _make_callback(
    name: str, fn: HostFn, nparams: int, result: str | None, on_error: int
) -> Any:
    """Build the C callback for one hostcall.

    The Python function receives the current GuestRun and the i32 params and
    returns the result. A HostInterrupt ends the guest with a trap; any other
    exception is a host bug: it is reported on the run and the guest gets
    `on_error` (EIO) instead of a crash.
    """

    def callback(_env: Any, _caller: Any, raw: Any, _n: int) -> int:
        run: GuestRun = _current.run
        try:
            if nparams == 0:
                value = fn(run)
            elif nparams == 1:
                value = fn(run, raw[0].i32)
            elif nparams == 2:
                value = fn(run, raw[0].i32, raw[1].i32)
            elif nparams == 3:
                value = fn(run, raw[0].i32, raw[1].i32, raw[2].i32)
            elif nparams == 4:
                value = fn(run, raw[0].i32, raw[1].i32, raw[2].i32, raw[3].i32)
            else:
                value = fn(run, *(raw[i].i32 for i in range(nparams)))
        except HostInterrupt as interrupt:
            run.note_interrupt(interrupt.outcome, interrupt.message)
            return trap_pointer(interrupt.message)
        except BaseException as exc:
            run.note_host_bug(name, exc)
            value = on_error
        if result == I32:
            raw[0].i32 = value if value is not None else 0
        elif result == I64:
            raw[0].i64 = value if value is not None else 0
        return 0

    return _CALLBACK_T(callback)


def define_hostcall(
    linker: wasmtime.Linker,
    module: str,
    name: str,
    params: tuple[str, ...],
    results: tuple[str, ...],
    fn: HostFn,
    on_error: int,
) -> None:
    cb = _make_callback(f"{module}.{name}", fn, len(params), results[0] if results else None,
                        on_error)
    _KEEP_ALIVE.append(cb)
    ty = _functype(params, results)
    mod_b, name_b = module.encode(), name.encode()
    error = ffi.wasmtime_linker_define_func_unchecked(
        linker.ptr(),
        ctypes.create_string_buffer(mod_b),
        len(mod_b),
        ctypes.create_string_buffer(name_b),
        len(name_b),
        ty.ptr(),
        cb,
        None,
        _NO_FINALIZER,
    )
    if error:
        import wasmtime

        raise wasmtime.WasmtimeError._from_ptr(error)


class GuestCallError(Exception):
    """A call into the guest trapped or failed; `exit_code` is set for proc_exit."""

    def __init__(self, message: str, trap_code: int | None = None,
                 exit_code: int | None = None) -> None:
        super().__init__(message)
        self.trap_code = trap_code
        self.exit_code = exit_code


def trap_summary(code: Any, message: str) -> str:
    """One line naming the trap: wasmtime puts the cause after a backtrace."""
    for line in message.splitlines():
        line = line.strip()
        if line.startswith("wasm trap:"):
            return line
    if code is not None:
        name: str = code.name
        return "wasm trap: " + name.lower().replace("_", " ")
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    return lines[-1] if lines else "wasm trap"


def _raise_call_failure(error: Any, trap: Any) -> None:
    import wasmtime

    if error:
        err = wasmtime.WasmtimeError._from_ptr(error)
        if isinstance(err, wasmtime.ExitTrap):
            raise GuestCallError(f"exit {err.code}", exit_code=err.code)
        raise GuestCallError(trap_summary(None, str(err)))
    trap_obj = wasmtime.Trap._from_ptr(trap)
    code = trap_obj.trap_code
    raise GuestCallError(trap_summary(code, trap_obj.message),
                         trap_code=code.value if code is not None else None)


class RawFunc:
    """A guest function called through wasmtime_func_call_unchecked."""

    __slots__ = ("_args", "_ctx", "_func", "_nargs", "_size")

    def __init__(self, store: wasmtime.Store, func: wasmtime.Func, nparams: int,
                 nresults: int) -> None:
        self._ctx = store._context()
        self._func = ctypes.byref(func._func)
        self._size = max(nparams, nresults)
        self._nargs = nparams
        self._args = (_VAL_RAW * max(self._size, 1))()

    def call_i32(self, *args: int) -> int:
        """Call with i32 params; returns the first i32 result (0 if none)."""
        buf = self._args
        for i, value in enumerate(args):
            buf[i].i32 = value
        trap = ctypes.POINTER(ffi.wasm_trap_t)()
        error = ffi.wasmtime_func_call_unchecked(self._ctx, self._func, buf, self._size,
                                                 ctypes.byref(trap))
        if error or trap:
            _raise_call_failure(error, trap)
        return int(buf[0].i32)


_DEADLINE_CB_T = ctypes.CFUNCTYPE(
    ctypes.c_size_t,
    ctypes.POINTER(ffi.wasmtime_context_t),
    ctypes.c_void_p,
    ctypes.POINTER(ctypes.c_uint64),
    ctypes.POINTER(ffi.wasmtime_update_deadline_kind_t),
)


def _on_epoch_deadline(_ctx: Any, _env: Any, delta: Any, kind: Any) -> int:
    """Called by wasmtime at every epoch tick the guest runs through.

    The run decides whether to continue (deadline not reached, not cancelled):
    wasm code cannot be interrupted from another thread any other way.
    """
    run: GuestRun | None = getattr(_current, "run", None)
    reason = run.interrupt_reason() if run is not None else None
    if reason is None:
        delta[0] = 1
        kind[0] = 0  # WASMTIME_UPDATE_DEADLINE_CONTINUE
        return 0
    assert run is not None
    run.note_interrupt(reason[0], reason[1])
    raw = reason[1].encode()
    err = ffi.wasmtime_error_new(ctypes.c_char_p(raw))
    value: int = ctypes.cast(err, ctypes.c_void_p).value or 0
    return value


_DEADLINE_CB = _DEADLINE_CB_T(_on_epoch_deadline)


def watch_epochs(store: wasmtime.Store) -> None:
    """Route this store's epoch deadlines through the current run's checks."""
    ffi.wasmtime_store_epoch_deadline_callback(store.ptr(), _DEADLINE_CB, None, _NO_FINALIZER)
    store.set_epoch_deadline(1)


def memory_span(store: wasmtime.Store, memory: wasmtime.Memory) -> tuple[int, int]:
    """(base address, byte length) of a guest memory right now."""
    ctx = store._context()
    mem = ctypes.byref(memory._memory)
    base = ctypes.cast(ffi.wasmtime_memory_data(ctx, mem), ctypes.c_void_p).value or 0
    return base, int(ffi.wasmtime_memory_data_size(ctx, mem))
