"""Limits that must hold inside one hostcall, not only between them.

Epoch interruption stops the guest's wasm, never the host's own Python: a
hostcall doing long work for the guest (checking a big tool schema) would run
past the run's deadline and ignore cancel, and the objects it builds from the
guest's bytes take many times their size. So:

- `json_cost` prices JSON text at what the host will keep once it is parsed,
  before it is parsed (the run's budget is charged that, not the text's size);
- `bounded` runs host work under the run's deadline and cancel.
"""

from __future__ import annotations

import ctypes
import inspect
import sys
import threading
import time
from collections.abc import Callable
from types import FrameType
from typing import TYPE_CHECKING, Any, TypeVar, cast

from spearpy.errors import HostInterrupt

if TYPE_CHECKING:
    from spearpy.context import RunContext

T = TypeVar("T")

# Bytes Python keeps per JSON token once parsed: each `{`, `[`, `,` or `:`
# stands for at most one container, item or key. Measured (tracemalloc) on
# arrays of dicts, lists, strings and floats and on wide objects: at most ~73
# bytes a token for a parsed value, ~190 for a tool schema with what
# jsonschema and the fast-path checks keep per subschema (17-31x the text).
# Those characters inside strings count too: an overestimate, never an under one.
PARSED_BYTES_PER_TOKEN = 80
SCHEMA_BYTES_PER_TOKEN = 200


def json_tokens(raw: bytes) -> int:
    """The `{`, `[`, `,` and `:` in `raw`: C-speed counts, no parsing."""
    return raw.count(b"{") + raw.count(b"[") + raw.count(b",") + raw.count(b":")


def json_cost(raw: bytes, per_token: int = PARSED_BYTES_PER_TOKEN) -> int:
    """What keeping `raw` parsed costs the host, at most: its size plus a
    share per token."""
    return len(raw) + per_token * json_tokens(raw)


class _Overtime(BaseException):
    """Raised into the host work when the run's deadline or cancel came.

    A BaseException, so no `except Exception` inside a library swallows it."""


# Raising from a trace hook is not enough: an exception raised where Python
# cannot propagate it (a generator being finalised, a __del__) is printed and
# dropped, and Python then removes the hook, so the work would go on
# unbounded. The hook instead asks for an asynchronous exception on its own
# thread, which surfaces at once in the frame being entered; if that one is
# dropped the hook, still installed, asks again at the next call.
_async_exc = ctypes.pythonapi.PyThreadState_SetAsyncExc
_async_exc.argtypes = (ctypes.c_ulong, ctypes.py_object)
_async_exc.restype = ctypes.c_int
_NOT_HERE = inspect.CO_GENERATOR | inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR


def bounded(run: RunContext, work: Callable[[], T]) -> T:
    """`work()`, stopped at the run's deadline (a tool's, inside a tool) or
    cancel: the run then ends as those do (HostInterrupt), exactly as if the
    guest had been running wasm.

    A trace hook on this thread checks the clock at every Python call and
    stops the work past the deadline. It only sees Python code; the C calls
    inside (json parsing, regex compilation) are bounded by the hostcalls'
    size caps instead. Only for work that may be long: tracing makes Python
    calls ~2x slower.
    """
    reason = run.interrupts.reason()
    if reason is not None:
        raise HostInterrupt(*reason)
    end = run.interrupts.effective_deadline()
    cancelled = run.interrupts.cancel_event.is_set
    now = time.monotonic
    thread = threading.get_ident()
    outer = sys.gettrace()  # a debugger's or coverage's hook: kept working

    def hook(frame: FrameType, event: str, arg: Any) -> Any:
        if ((end is not None and now() >= end) or cancelled()) and _can_stop(frame):
            _async_exc(thread, _Overtime)
        return outer(frame, cast(Any, event), arg) if outer is not None else None

    try:
        try:
            sys.settrace(hook)
            return work()
        finally:
            # A pending request surfaces at the latest when this call
            # returns (CPython checks for them after every call).
            sys.settrace(outer)
    except _Overtime:
        pass
    # Belt and braces: anything still pending surfaces here, not in the
    # caller. (Clearing it with PyThreadState_SetAsyncExc(id, NULL) instead
    # leaves 3.11's eval breaker set, which silently stops later tracing.)
    # Not contextlib.suppress: it would surface in suppress.__enter__, unguarded.
    try:  # noqa: SIM105
        _drain()
    except _Overtime:
        pass
    reason = run.interrupts.reason()
    raise HostInterrupt(*(reason or ("timeout", "the run exceeded its deadline")))


def _drain() -> None:
    """A call: entering it is where a pending asynchronous exception surfaces."""


def _can_stop(frame: FrameType) -> bool:
    """Whether an exception surfacing in `frame` reaches the work's caller.
    Not in a generator (it may be being finalised), a __del__, or an import:
    a module left half-initialised would break every later run in the
    process. The next ordinary call is never far off."""
    code = frame.f_code
    if code.co_flags & _NOT_HERE or code.co_name == "__del__":
        return False
    while frame is not None:
        if frame.f_code.co_filename.startswith(_IMPORT_MACHINERY) or \
                frame.f_code.co_filename.endswith(_IMPORT_FILES):
            return False
        frame = frame.f_back  # type: ignore[assignment]
    return True


# importlib is frozen in CPython's usual builds, plain files in some others.
_IMPORT_MACHINERY = "<frozen importlib"
_IMPORT_FILES = ("importlib/_bootstrap.py", "importlib/_bootstrap_external.py")
