"""What a failed guest call says about how the run ended.

wasmtime reports a trap or an error; the run's outcome (spearpy/outcome.py)
also depends on what the host knows: an interrupt it set (deadline, cancel, a
limit), the fuel budget, how close linear memory was to --max-memory, and the
store limits below, which refuse a module before any of its code runs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import wasmtime

from spearpy import _native
from spearpy.outcome import Outcome

if TYPE_CHECKING:
    from spearpy.config import HostConfig
    from spearpy.memory import GuestMemory

# Store limits beyond --max-memory. wasmtime applies memory_size per linear
# memory and table_elements per table, and a table.grow loop otherwise takes
# gigabytes of host RAM; toolchains emit one memory and one table, and a
# large C or Rust program's function table holds a few thousand entries.
MAX_MEMORIES = 1
MAX_TABLES = 4
MAX_TABLE_ELEMENTS = 1 << 20
# A trap with linear memory above this share of --max-memory is reported as
# memory_limit: the guest most likely trapped because a grow was refused
# (an allocator's abort, or a store past the end it could not grow).
_NEAR_MEMORY_LIMIT = 0.75

Ending = tuple[Outcome, str]  # (outcome, message)


def classify_error(text: str, interrupt: Ending | None, config: HostConfig) -> Ending:
    """A WasmtimeError from instantiation or the entry call."""
    if interrupt is not None:
        return interrupt
    if "fuel" in text:
        return Outcome.FUEL_EXHAUSTED, f"the run used up its fuel budget ({config.fuel})"
    first = _native.trap_summary(None, text)
    # Instantiation refused by the store limits: the module asks for more
    # than this run may have before any of its code runs.
    if "exceeds memory limits" in text:
        return Outcome.MEMORY_LIMIT, (f"{first}: the module's initial memory is larger than "
                                f"the memory limit of {config.max_memory} bytes")
    if "exceeds table limits" in text or "resource limit exceeded" in text:
        return Outcome.LOAD_ERROR, (f"{first} (spearpy allows {MAX_MEMORIES} memory, "
                              f"{MAX_TABLES} tables of up to {MAX_TABLE_ELEMENTS} elements)")
    return Outcome.TRAP, first


def classify_trap(code: wasmtime.TrapCode | None, text: str, interrupt: Ending | None,
                  config: HostConfig, memory: GuestMemory) -> Ending:
    """A wasm trap out of the entry call."""
    if interrupt is not None:
        return interrupt
    if code == wasmtime.TrapCode.OUT_OF_FUEL:
        return Outcome.FUEL_EXHAUSTED, f"the run used up its fuel budget ({config.fuel})"
    first = _native.trap_summary(code, text)
    if code == wasmtime.TrapCode.STACK_OVERFLOW:
        return Outcome.TRAP, "wasm trap: call stack exhausted (stack overflow)"
    limit = config.max_memory
    if limit is not None and memory.available:
        size = memory.size()
        if size + 65536 > limit or size >= limit * _NEAR_MEMORY_LIMIT:
            return Outcome.MEMORY_LIMIT, (f"the guest trapped ({first}) with {size} bytes of "
                                    f"linear memory, near the memory limit of {limit} bytes")
    return Outcome.TRAP, first
