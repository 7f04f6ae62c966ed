"""Calling a guest tool: `tool(args_ptr, args_len, out_ptr, out_len_ptr) -> i32`.

spear-abi.md section 5. Buffers live in the guest's arena (SPEAR layout) or in
memory from the guest's own `spear_alloc`; -28 with a needed length grows the
output buffer up to `max_tool_output_bytes`. Everything the tool does wrong
(traps, lies about lengths, non-UTF-8, timeouts) fails that call only.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from spearpy import abi
from spearpy.chat.protocol import CallBudget, ToolOutcome
from spearpy.errors import GuestCallError
from spearpy.memory import GuestFault

if TYPE_CHECKING:
    from spearpy.context import RunContext

# A tool that keeps answering -28 with a new size is either buggy or hostile;
# three growths cover every honest "measure, then write" tool.
MAX_ATTEMPTS = 4
# First output buffer when the host allocates: most tool outputs are small.
INITIAL_CAPACITY = 16 * 1024


def _align8(value: int) -> int:
    return (value + 7) & ~7


class _NoRoom(Exception):
    pass


def _allocated_buffers(run: RunContext, nargs: int,
                       capacity: int) -> tuple[int, int, int, int, int]:
    """(args_ptr, out_ptr, capacity, len_ptr, size) in a block from spear_alloc
    (the block starts at args_ptr) for `nargs` bytes of arguments."""
    args_size = _align8(nargs + 1)
    size = args_size + _align8(capacity) + 8
    alloc = run.allocator
    if alloc is None:
        raise _NoRoom("the guest exports no spear_alloc/spear_free")
    block = alloc[0].call_i32(size) & 0xFFFFFFFF
    if block == 0:
        raise _NoRoom(f"spear_alloc({size}) returned NULL")
    # The arguments are written by the caller, inside the try that frees the block.
    return block, block + args_size, capacity, block + args_size + _align8(capacity), size


def _release(run: RunContext, block: int, size: int) -> None:
    if run.allocator is not None:
        # A trapping free leaks guest memory, nothing of the host's.
        with contextlib.suppress(GuestCallError):
            run.allocator[1].call_i32(block, size)


def _failure(code: str, message: str, started: float, rc: int | None = None) -> ToolOutcome:
    return ToolOutcome(ok=False, error_code=code, error_message=message, rc=rc,
                       duration_ms=(time.monotonic() - started) * 1000.0)


class GuestTools:
    """The guest's funcref table as a tool source (chat.protocol.ToolSource):
    a tool registered with cchat_write_fn is known by its table index, and
    called under the session's tool arena, if it declared one."""

    kind = "guest"
    __slots__ = ("_arena", "_budget", "_run")

    def __init__(self, run: RunContext) -> None:
        self._run = run
        # The arena of the send whose budget came last. A session's params
        # cannot change while it sends (the hostcalls refuse), so it is read
        # from them once per send, not on every call.
        self._budget: CallBudget | None = None
        self._arena: tuple[int, int] | None = None

    def call(self, ref: Any, arguments: str, budget: CallBudget) -> ToolOutcome:
        """One tool call, under one tool deadline for all of it: spear_alloc,
        every -28 retry and spear_free, so neither a spinning allocator nor a
        tool that keeps asking for more room gets more than --tool-timeout.
        (call_tool below is the same call for a caller without a budget.)"""
        if budget is not self._budget:
            self._budget, self._arena = budget, tool_arena(budget.params)
        run, fn_offset, max_output, arena = self._run, int(ref), budget.max_output_bytes, \
            self._arena
        stops = run.interrupts
        # arm_tool's and tool_function's first tests, made here: their two
        # calls are 3 % of P1's tool call (docs/benchmarks.md).
        armed = stops.tool_timeout is not None and stops.arm_tool()
        try:
            started = time.monotonic()
            func = run.tool_funcs.get(fn_offset)
            if func is None:  # not looked up yet, or not a tool function: it decides
                func = run.tool_function(fn_offset)
            if func is None:
                return _failure(abi.TOOL_EXEC_FAILED,
                                f"table entry {fn_offset} is not a (i32,i32,i32,i32)->i32 function",
                                started)
            args_z = arguments.encode("utf-8") + b"\0"  # the ABI's NUL after the arguments
            nargs = len(args_z) - 1
            # SPEAR layout in the arena: args (+NUL) at its base, the output
            # 8-aligned after them, the u32 length word 8-aligned after the
            # output. arena_capacity < 0: no arena, or the arguments do not fit.
            arena_capacity = -1
            base = arena_out = arena_len_ptr = 0
            if arena is not None:
                base = arena[0] & 0xFFFFFFFF
                arena_out = (base + nargs + 8) & -8  # 8-aligned past the arguments and NUL
                room = ((base + arena[1] - 4) & -8) - arena_out
                if room >= 0:
                    arena_capacity = room if room < max_output else max_output
                    arena_len_ptr = (arena_out + arena_capacity + 7) & -8
            if arena_capacity < 0 and run.allocator is None:
                why = ("the tool arena is too small for the arguments" if arena else
                       "the guest declared no tool arena (tool_arena_ptr/tool_arena_len)")
                return _failure(abi.TOOL_EXEC_FAILED,
                                f"{why} and exports no spear_alloc/spear_free", started)
            memory = run.memory
            wanted: int | None = None
            try:
                for _attempt in range(MAX_ATTEMPTS):
                    block_size = 0  # > 0: a spear_alloc'd block to free
                    if arena_capacity >= 0 and (wanted is None or wanted <= arena_capacity):
                        args_ptr, out_ptr, capacity, len_ptr = base, arena_out, arena_capacity, \
                            arena_len_ptr
                    elif run.allocator is not None:
                        args_ptr, out_ptr, capacity, len_ptr, block_size = _allocated_buffers(
                            run, nargs, wanted or min(INITIAL_CAPACITY, max_output))
                    else:
                        held = arena_capacity if arena_capacity >= 0 else 0
                        return _failure(abi.TOOL_EXEC_FAILED,
                                        f"the tool needs {wanted} output bytes but the arena holds "
                                        f"{held}; export spear_alloc/spear_free to "
                                        "let the host grow the buffer", started)
                    try:
                        rc, length, raw = memory.call_with_out_buffer(
                            func, args_ptr, args_z, nargs, out_ptr, len_ptr, capacity)
                        if rc == abi.ENOSPC:
                            if length > max_output:
                                return _failure(abi.TOOL_OUTPUT_TOO_LARGE,
                                                f"the tool needs {length} output bytes; "
                                                f"max_tool_output_bytes is {max_output}",
                                                started, rc)
                            if length <= capacity:
                                return _failure(abi.TOOL_EXEC_FAILED,
                                                f"the tool returned -28 asking for {length} bytes "
                                                f"but the buffer already held {capacity}",
                                                started, rc)
                            wanted = length
                            continue
                        if rc != 0:
                            return _failure(abi.TOOL_EXEC_FAILED, f"the tool returned {rc}",
                                            started, rc)
                        if raw is None:
                            return _failure(abi.TOOL_EXEC_FAILED,
                                            f"the tool claimed {length} output bytes but the "
                                            f"buffer holds {capacity}", started, rc)
                    finally:
                        if block_size:  # arena buffers need no release
                            _release(run, args_ptr, block_size)
                    try:
                        text = raw.decode("utf-8")
                    except UnicodeDecodeError as exc:
                        return _failure(abi.TOOL_EXEC_FAILED,
                                        f"the tool output is not UTF-8 (byte {exc.start})",
                                        started, 0)
                    return ToolOutcome(True, text, None, None, 0,
                                       (time.monotonic() - started) * 1000.0)
                return _failure(abi.TOOL_EXEC_FAILED,
                                f"the tool asked for a larger buffer {MAX_ATTEMPTS} times", started,
                                abi.ENOSPC)
            except GuestCallError as exc:
                reason = stops.take_tool_timeout()
                if reason is not None:
                    return _failure(abi.TOOL_EXEC_FAILED, reason, started)
                return _failure(abi.TOOL_EXEC_FAILED, f"the tool trapped: {exc}", started)
            except GuestFault as exc:
                return _failure(abi.TOOL_EXEC_FAILED, f"tool buffers outside guest memory: {exc}",
                                started)
            except _NoRoom as exc:
                return _failure(abi.TOOL_EXEC_FAILED, str(exc), started)
        finally:
            if armed:
                stops.disarm_tool()


def call_tool(run: RunContext, fn_offset: int, arguments: str, max_output: int,
              arena: tuple[int, int] | None) -> ToolOutcome:
    """GuestTools.call with its output cap and arena given, not read from a budget."""
    source, budget = GuestTools(run), CallBudget(max_output)
    source._budget, source._arena = budget, arena
    return source.call(fn_offset, arguments, budget)


def tool_arena(params: Mapping[str, Any]) -> tuple[int, int] | None:
    """The session's tool arena (tool_arena_ptr/_len params), if it set one."""
    ptr, length = params.get("tool_arena_ptr"), params.get("tool_arena_len")
    return (ptr, length) if isinstance(ptr, int) and isinstance(length, int) and \
        length > 0 else None
