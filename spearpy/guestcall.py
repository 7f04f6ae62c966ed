"""Calling a guest tool: `tool(args_ptr, args_len, out_ptr, out_len_ptr) -> i32`.

spear-abi.md section 5. Buffers live in the guest's arena (SPEAR layout) or in
memory from the guest's own `spear_alloc`; -28 with a needed length grows the
output buffer up to `max_tool_output_bytes`. Everything the tool does wrong
(traps, lies about lengths, non-UTF-8, timeouts) fails that call only.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from spearpy import abi
from spearpy._native import GuestCallError
from spearpy.chat.protocol import ToolOutcome
from spearpy.memory import GuestFault

if TYPE_CHECKING:
    from spearpy.instance import GuestRun

# A tool that keeps answering -28 with a new size is either buggy or hostile;
# three growths cover every honest "measure, then write" tool.
MAX_ATTEMPTS = 4
# First output buffer when the host allocates: most tool outputs are small.
INITIAL_CAPACITY = 16 * 1024


def _align8(value: int) -> int:
    return (value + 7) & ~7


@dataclass(slots=True)
class _Buffers:
    args_ptr: int
    out_ptr: int
    capacity: int
    len_ptr: int
    block: int | None = None  # spear_alloc'd block to free, if any
    block_size: int = 0


class _NoRoom(Exception):
    pass


def _arena_layout(base: int, length: int, args_len: int, limit: int) -> _Buffers | None:
    """SPEAR layout: args (+NUL) at the base, output 8-aligned after them,
    the u32 length word 8-aligned after the output. None when it cannot fit."""
    base &= 0xFFFFFFFF
    out_ptr = (base + args_len + 1 + 7) & ~7  # _align8, inlined: once per tool call
    room = ((base + length - 4) & ~7) - out_ptr
    if room < 0:
        return None
    capacity = min(room, limit)
    return _Buffers(base, out_ptr, capacity, (out_ptr + capacity + 7) & ~7)


def _allocated_buffers(run: GuestRun, args: bytes, capacity: int) -> _Buffers:
    args_size = _align8(len(args) + 1)
    size = args_size + _align8(capacity) + 8
    alloc = run.allocator
    if alloc is None:
        raise _NoRoom("the guest exports no spear_alloc/spear_free")
    block = alloc[0].call_i32(size) & 0xFFFFFFFF
    if block == 0:
        raise _NoRoom(f"spear_alloc({size}) returned NULL")
    # The arguments are written by the caller, inside the try that frees the block.
    return _Buffers(block, block + args_size, capacity, block + args_size + _align8(capacity),
                    block, size)


def _release(run: GuestRun, buffers: _Buffers) -> None:
    if buffers.block is not None and run.allocator is not None:
        # A trapping free leaks guest memory, nothing of the host's.
        with contextlib.suppress(GuestCallError):
            run.allocator[1].call_i32(buffers.block, buffers.block_size)


def _failure(code: str, message: str, started: float, rc: int | None = None) -> ToolOutcome:
    return ToolOutcome(ok=False, error_code=code, error_message=message, rc=rc,
                       duration_ms=(time.monotonic() - started) * 1000.0)


def call_tool(run: GuestRun, fn_offset: int, arguments: str, max_output: int,
              arena: tuple[int, int] | None) -> ToolOutcome:
    """One tool call, under one tool deadline for all of it: spear_alloc,
    every -28 retry and spear_free, so neither a spinning allocator nor a tool
    that keeps asking for more room gets more than --tool-timeout."""
    armed = run.interrupts.arm_tool()
    try:  # one function, not a wrapper: this runs on every tool call
        started = time.monotonic()
        func = run.tool_function(fn_offset)
        if func is None:
            return _failure(abi.TOOL_EXEC_FAILED,
                            f"table entry {fn_offset} is not a (i32,i32,i32,i32)->i32 function",
                            started)
        args = arguments.encode("utf-8")
        args_z = args + b"\0"  # the ABI's NUL after the arguments
        in_arena = _arena_layout(arena[0], arena[1], len(args), max_output) if arena else None
        if in_arena is None and run.allocator is None:
            why = ("the tool arena is too small for the arguments" if arena else
                   "the guest declared no tool arena (tool_arena_ptr/tool_arena_len)")
            return _failure(abi.TOOL_EXEC_FAILED,
                            f"{why} and exports no spear_alloc/spear_free", started)
        wanted: int | None = None
        try:
            for _attempt in range(MAX_ATTEMPTS):
                if in_arena is not None and (wanted is None or wanted <= in_arena.capacity):
                    buffers = in_arena
                elif run.allocator is not None:
                    buffers = _allocated_buffers(run, args,
                                                 wanted or min(INITIAL_CAPACITY, max_output))
                else:
                    held = in_arena.capacity if in_arena is not None else 0
                    return _failure(abi.TOOL_EXEC_FAILED,
                                    f"the tool needs {wanted} output bytes but the arena holds "
                                    f"{held}; export spear_alloc/spear_free to "
                                    "let the host grow the buffer", started)
                try:
                    run.memory.write_with_u32(buffers.args_ptr, args_z, buffers.len_ptr,
                                              buffers.capacity)
                    rc = func.call_i32(buffers.args_ptr, len(args), buffers.out_ptr,
                                       buffers.len_ptr)
                    if rc == abi.ENOSPC:
                        needed = run.memory.read_u32(buffers.len_ptr)
                        if needed > max_output:
                            return _failure(abi.TOOL_OUTPUT_TOO_LARGE,
                                            f"the tool needs {needed} output bytes; "
                                            f"max_tool_output_bytes is {max_output}", started, rc)
                        if needed <= buffers.capacity:
                            return _failure(abi.TOOL_EXEC_FAILED,
                                            f"the tool returned -28 asking for {needed} bytes "
                                            f"but the buffer already held {buffers.capacity}",
                                            started, rc)
                        wanted = needed
                        continue
                    if rc != 0:
                        return _failure(abi.TOOL_EXEC_FAILED, f"the tool returned {rc}",
                                        started, rc)
                    length, raw = run.memory.read_counted(buffers.len_ptr, buffers.out_ptr,
                                                          buffers.capacity)
                    if raw is None:
                        return _failure(abi.TOOL_EXEC_FAILED,
                                        f"the tool claimed {length} output bytes but the buffer "
                                        f"holds {buffers.capacity}", started, rc)
                finally:
                    if buffers.block is not None:  # arena buffers need no release
                        _release(run, buffers)
                try:
                    text = raw.decode("utf-8")
                except UnicodeDecodeError as exc:
                    return _failure(abi.TOOL_EXEC_FAILED,
                                    f"the tool output is not UTF-8 (byte {exc.start})", started, 0)
                return ToolOutcome(ok=True, output=text, rc=0,
                                   duration_ms=(time.monotonic() - started) * 1000.0)
            return _failure(abi.TOOL_EXEC_FAILED,
                            f"the tool asked for a larger buffer {MAX_ATTEMPTS} times", started,
                            abi.ENOSPC)
        except GuestCallError as exc:
            reason = run.interrupts.take_tool_timeout()
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
            run.interrupts.disarm_tool()
