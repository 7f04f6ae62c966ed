"""The thin layer over wasmtime's C API that spearpy's hot paths go through.

wasmtime-py's generic `Func.__call__` and `Linker.define_func` convert every
value through `Val` objects and route Python exceptions through a single
process-global slot, which is both slow (~20 us a call) and unsafe when several
threads run guests at once. Hostcalls and guest tool calls therefore use the
"unchecked" entry points with raw value arrays, and each run keeps its own
record of why it interrupted the guest.
"""

from __future__ import annotations

import contextlib
import ctypes
import struct
import sys
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final, Protocol

from wasmtime import _ffi as ffi

from spearpy.errors import GuestCallError, HostInterrupt

if TYPE_CHECKING:
    import wasmtime

    from spearpy.interrupts import Interrupts


class CurrentRun(Protocol):
    """What the trampolines need of the run on this thread (a RunContext)."""

    @property
    def interrupts(self) -> Interrupts: ...

    def note_host_bug(self, where: str, exc: BaseException) -> None: ...

I32: Final = "i32"
I64: Final = "i64"

_VAL_RAW = ffi.wasmtime_val_raw_t
_VAL_RAW_SIZE: Final = ctypes.sizeof(_VAL_RAW)
# Hot-path entry points typed with plain addresses (c_void_p) instead of
# wasmtime-py's pointer types: ctypes then passes ints straight through, with
# no pointer objects built per call. `dll[name]` yields a fresh function
# object, so wasmtime-py's own prototypes stay as they are.
_CALLBACK_T = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                               ctypes.c_void_p, ctypes.c_size_t)
_NO_FINALIZER = ctypes.cast(0, ctypes.CFUNCTYPE(None, ctypes.c_void_p))


def _proto(name: str, restype: Any, *argtypes: Any) -> Any:
    fn = ffi.dll[name]
    fn.restype = restype
    fn.argtypes = list(argtypes)
    return fn


_vp, _size_t = ctypes.c_void_p, ctypes.c_size_t
_memory_data = _proto("wasmtime_memory_data", _vp, _vp, _vp)
_memory_data_size = _proto("wasmtime_memory_data_size", _size_t, _vp, _vp)
# RawFunc's entry point has no argtypes: its five arguments are ctypes objects
# built once per function and passed through as they are, where argtypes
# would convert five ints on every call (~0.2 us of a ~0.7 us guest call).
_func_call_unchecked = ffi.dll["wasmtime_func_call_unchecked"]
_func_call_unchecked.restype = _vp
_define_func_unchecked = _proto("wasmtime_linker_define_func_unchecked", _vp, _vp, ctypes.c_char_p,
                                _size_t, ctypes.c_char_p, _size_t, _vp, _vp, _vp, _vp)
# One i32 param per 16-byte wasmtime_val_raw_t slot, unpacked in one call.
_PARAMS = [struct.Struct("<" + f"i{_VAL_RAW_SIZE - 4}x" * n) for n in range(9)]
_I32_RESULT = struct.Struct("<i")
_PACK4 = _PARAMS[4].pack_into
_I64_RESULT = struct.Struct("<q")
# The value array of a hostcall is at a different address on every call. A
# view of the whole address space reads and writes it with one struct call
# and no object per access (ctypes.string_at is a foreign call, ~0.8 us; a
# from_address object ~0.4 us). It starts at address 1 (ctypes refuses a
# NULL base) and is used only at the addresses wasmtime hands a hostcall.
_ADDRESS_SPACE = memoryview((ctypes.c_char * (1 << 62)).from_address(1)).cast("B")
# ctypes callback objects must outlive every linker that points at them.
_KEEP_ALIVE: list[object] = []

_current = threading.local()


def enter_run(run: CurrentRun | None) -> CurrentRun | None:
    """Make `run` current on this thread, returning the previous one."""
    previous: CurrentRun | None = getattr(_current, "run", None)
    _current.run = run
    return previous


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

    The Python function receives the current run (a RunContext) and the i32 params and
    returns the result. A HostInterrupt ends the guest with a trap; any other
    exception is a host bug: it is reported on the run and the guest gets
    `on_error` (EIO) instead of a crash.
    """

    unpack = _PARAMS[nparams].unpack_from
    store = None if result is None else (_I32_RESULT if result == I32 else _I64_RESULT).pack_into
    mask, sign = (0xFFFFFFFF, 1 << 31) if result == I32 else ((1 << 64) - 1, 1 << 63)
    space = _ADDRESS_SPACE

    def callback(_env: int | None, _caller: int | None, raw: int, _n: int) -> int:
        try:
            run: CurrentRun = _current.run
            try:
                value = fn(run, *unpack(space, raw - 1)) if nparams else fn(run)
            except HostInterrupt as interrupt:
                run.interrupts.note(interrupt.outcome, interrupt.message)
                return trap_pointer(interrupt.message)
            except BaseException as exc:
                run.note_host_bug(name, exc)
                value = on_error
            if store is not None:
                try:
                    store(space, raw - 1, value or 0)
                except struct.error:  # wrapped to the result's width: a u32
                    # answer reaches the guest as the same 32 bits
                    store(space, raw - 1, (((value or 0) + sign) & mask) - sign)
            return 0
        except BaseException as exc:
            return trap_pointer(_escaped(f"hostcall {name}", exc))

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
    error = _define_func_unchecked(linker.ptr(), mod_b, len(mod_b), name_b, len(name_b),
                                   ctypes.cast(ty.ptr(), ctypes.c_void_p),
                                   ctypes.cast(cb, ctypes.c_void_p), None, _NO_FINALIZER)
    if error:
        import wasmtime

        raise wasmtime.WasmtimeError._from_ptr(_error_ptr(error))


def _error_ptr(address: int) -> Any:
    return ctypes.cast(address, ctypes.POINTER(ffi.wasmtime_error_t))


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


class _LittleEndianI32:
    """`view.cast("i")[0]` for a big-endian host: the raw value's first i32."""

    __slots__ = ("_view",)

    def __init__(self, view: memoryview) -> None:
        self._view = view

    def __getitem__(self, _index: int) -> int:
        value: int = _I32_RESULT.unpack_from(self._view, 0)[0]
        return value


class RawFunc:
    """A guest function called through wasmtime_func_call_unchecked.

    The value array, the trap slot and every address are prepared once, so a
    call is a few int stores and one foreign call.
    """

    __slots__ = ("_args", "_args_at", "_call_args", "_ctx", "_ctx_at", "_func", "_func_at",
                 "_nargs", "_result", "_size", "_store", "_trap", "_trap_at", "_trap_slot",
                 "_values")

    def __init__(self, store: wasmtime.Store, func: wasmtime.Func, nparams: int,
                 nresults: int) -> None:
        self._store = store  # the context address is only valid while the store lives
        self._func = func
        self._ctx = _address(store._context())
        self._func_at = ctypes.addressof(func._func)
        self._size = max(nparams, nresults)
        self._nargs = nparams
        self._args = (_VAL_RAW * max(self._size, 1))()
        self._args_at = ctypes.addressof(self._args)
        # Params in and the result out with one struct call each (a ctypes
        # object per value cost ~0.1 us).
        self._values = memoryview(self._args).cast("B")
        # The first result as an i32 read by index: no tuple per call. A raw
        # value is little-endian, which a native cast reads right only on a
        # little-endian host.
        self._result: Any = (self._values.cast("i") if sys.byteorder == "little"
                             else _LittleEndianI32(self._values))
        # The trap slot, read and reset through a memoryview: a c_void_p's
        # `.value` looks its type's field description up on every access.
        self._trap = (ctypes.c_uint64 * 1)()
        self._trap_at = ctypes.addressof(self._trap)
        self._trap_slot = memoryview(self._trap).cast("B").cast("Q")
        # The call's arguments as C values, typed once (no argtypes: see above).
        # The four pointers are byref() objects of what they point at: ctypes
        # passes such an object's address as it is, where a c_void_p argument
        # builds a parameter object (and looks its type's format up) per call.
        self._ctx_at = (ctypes.c_char * 1).from_address(self._ctx)  # the store keeps it valid
        self._call_args = (ctypes.byref(self._ctx_at), ctypes.byref(func._func),
                           ctypes.byref(self._args), _size_t(self._size),
                           ctypes.byref(self._trap))

    def call_i32(self, *args: int) -> int:
        """Call with i32 params; returns the first i32 result (0 if none)."""
        try:
            _PARAMS[len(args)].pack_into(self._values, 0, *args)
        except struct.error:  # a u32 past i32's range: wasm sees the same 32 bits
            _PARAMS[len(args)].pack_into(self._values, 0, *(
                ((value + 0x80000000) & 0xFFFFFFFF) - 0x80000000 for value in args))
        trap_slot = self._trap_slot
        trap_slot[0] = 0
        error = _func_call_unchecked(*self._call_args)
        trap = trap_slot[0]
        if error or trap:
            _raise_call_failure(_error_ptr(error) if error else None,
                                ctypes.cast(trap or 0, ctypes.POINTER(ffi.wasm_trap_t)))
        result: int = self._result[0]
        return result

    def call4_i32(self, a: int, b: int, c: int, d: int) -> int:
        """call_i32 for a function of four i32 params (a guest tool): no
        argument tuple to build and measure on every tool call."""
        values = self._values
        try:
            _PACK4(values, 0, a, b, c, d)
        except struct.error:  # a u32 past i32's range: call_i32 wraps it
            return self.call_i32(a, b, c, d)
        trap_slot = self._trap_slot
        trap_slot[0] = 0
        error = _func_call_unchecked(*self._call_args)
        trap = trap_slot[0]
        if error or trap:
            _raise_call_failure(_error_ptr(error) if error else None,
                                ctypes.cast(trap or 0, ctypes.POINTER(ffi.wasm_trap_t)))
        result: int = self._result[0]
        return result


def _address(pointer: Any) -> int:
    value: int = ctypes.cast(pointer, ctypes.c_void_p).value or 0
    return value


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
    try:
        run: CurrentRun | None = getattr(_current, "run", None)
        reason = run.interrupts.reason() if run is not None else None
        if reason is None:
            delta[0] = 1
            kind[0] = 0  # WASMTIME_UPDATE_DEADLINE_CONTINUE
            return 0
        assert run is not None
        run.interrupts.note(reason[0], reason[1])
        return _error_pointer(reason[1])
    except BaseException as exc:
        return _error_pointer(_escaped("the epoch deadline check", exc))


def _error_pointer(message: str) -> int:
    err = ffi.wasmtime_error_new(ctypes.c_char_p(message.encode()))
    value: int = ctypes.cast(err, ctypes.c_void_p).value or 0
    return value


def _escaped(where: str, exc: BaseException) -> str:
    """Note a failure that reached the top of a C callback; the message of the
    trap that ends the guest instead. An exception must never leave a ctypes
    callback: ctypes only prints it and hands wasmtime an undefined result
    (for the epoch callback, an uninitialised deadline update), which crashed
    the process."""
    with contextlib.suppress(BaseException):
        run: CurrentRun | None = getattr(_current, "run", None)
        if run is not None:
            run.note_host_bug(where, exc)
    return f"spearpy host error in {where}: {type(exc).__name__}"


_DEADLINE_CB = _DEADLINE_CB_T(_on_epoch_deadline)


def watch_epochs(store: wasmtime.Store) -> None:
    """Route this store's epoch deadlines through the current run's checks."""
    ffi.wasmtime_store_epoch_deadline_callback(store.ptr(), _DEADLINE_CB, None, _NO_FINALIZER)
    store.set_epoch_deadline(1)


# A memory's base address and byte length. Wasm code may grow the memory
# between any two host accesses, so the length is read fresh each time; the
# base is stable only because the Host's Engine sets memory_may_move = False.
memory_data = _memory_data
memory_data_size = _memory_data_size


def memory_handles(store: wasmtime.Store, memory: wasmtime.Memory) -> tuple[int, int]:
    """The (context, memory) addresses `memory_data*` take; valid while both
    Python objects live, so their holder must keep references to them."""
    return _address(store._context()), ctypes.addressof(memory._memory)


class MemorySpan:
    """Reads a guest memory's current base address and byte length."""

    __slots__ = ("_ctx", "_mem", "_memory", "_store")

    def __init__(self, store: wasmtime.Store, memory: wasmtime.Memory) -> None:
        self._store = store
        self._memory = memory
        self._ctx, self._mem = memory_handles(store, memory)

    def __call__(self) -> tuple[int, int]:
        ctx, mem = self._ctx, self._mem
        return _memory_data(ctx, mem) or 0, _memory_data_size(ctx, mem)

