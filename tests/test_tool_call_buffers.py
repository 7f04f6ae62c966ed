"""GuestMemory.call_with_out_buffer, the one step of every guest tool call
that writes the arguments, calls the tool and reads its counted output: each
range is checked before the call (a refused call never runs), an i32 that
stands for a u32 pointer means that pointer, and a claimed length past the
buffer or a failing result yields no bytes."""

from __future__ import annotations

from typing import Any

import pytest
import wasmtime

from spearpy import _native
from spearpy.memory import GuestFault
from tests.probe import Probe

PAGE = 65536

# table[0] grows memory by a page (so a test can tell whether it ran), copies
# its arguments to the output and stores their length, or a length of 5000
# when the arguments start with "!", and returns the first argument byte
# minus '{' (0 for a JSON object).
_ECHO = """
(module
  (memory (export "memory") 1)
  (func $echo (param $a i32) (param $n i32) (param $o i32) (param $lp i32) (result i32)
    (drop (memory.grow (i32.const 1)))
    (memory.copy (local.get $o) (local.get $a) (local.get $n))
    (if (i32.eq (i32.load8_u (local.get $a)) (i32.const 33))
      (then (i32.store (local.get $lp) (i32.const 5000)))
      (else (i32.store (local.get $lp) (local.get $n))))
    (i32.sub (i32.load8_u (local.get $a)) (i32.const 123)))
  (table (export "__indirect_function_table") 1 funcref)
  (elem (i32.const 0) $echo)
  (func (export "_start")))
"""


@pytest.fixture
def echo(make_host: Any) -> Any:
    probe = Probe(make_host(base_url="http://127.0.0.1:9/v1"),
                  bytes(wasmtime.wat2wasm(_ECHO)))
    previous = _native.enter_run(probe.run)
    try:
        func = probe.run.tool_function(0)
        assert func is not None
        yield probe.run.memory, func
    finally:
        _native.enter_run(previous)
        probe.close()


def test_a_call_writes_calls_and_reads_the_output(echo: Any) -> None:
    memory, func = echo
    rc, length, out = memory.call_with_out_buffer(func, 1024, b'{"a":1}\0', 7, 2048, 4096, 100)
    assert (rc, length, out) == (0, 7, b'{"a":1}')
    assert memory.size() == 2 * PAGE  # it ran once


def test_an_i32_standing_for_a_u32_pointer_is_that_pointer(echo: Any) -> None:
    memory, func = echo
    rc, length, out = memory.call_with_out_buffer(func, 1024 - (1 << 32), b"{}\0", 2,
                                                  2048 - (1 << 32), 4096 - (1 << 32), 100)
    assert (rc, length, out) == (0, 2, b"{}")


@pytest.mark.parametrize(("ptr", "out_ptr", "word_ptr", "capacity"), [
    (PAGE - 2, 2048, 4096, 100),        # the arguments straddle the end
    (1024, 2048, PAGE - 2, 100),        # the length word does
    (1024, PAGE - 50, 4096, 100),       # the output buffer does
    (1024, 2048, 4096, -1),             # a negative capacity
    (-16, 2048, 4096, 100),             # 0xFFFFFFF0: far past any memory
], ids=["args", "word", "output", "capacity", "far"])
def test_a_range_outside_memory_refuses_the_call_before_it_runs(
        echo: Any, ptr: int, out_ptr: int, word_ptr: int, capacity: int) -> None:
    memory, func = echo
    with pytest.raises(GuestFault):
        memory.call_with_out_buffer(func, ptr, b"{}\0", 2, out_ptr, word_ptr, capacity)
    assert memory.size() == PAGE  # the tool never ran


def test_a_length_past_the_buffer_or_a_failure_gives_no_bytes(echo: Any) -> None:
    memory, func = echo
    rc, length, out = memory.call_with_out_buffer(func, 1024, b"!{}\0", 3, 2048, 4096, 100)
    assert (rc, length, out) == (33 - 123, 5000, None)
    rc, length, out = memory.call_with_out_buffer(func, 1024, b"{!\0", 2, 2048, 4096, 100)
    assert (rc, length, out) == (0, 2, b"{!")
    rc, length, out = memory.call_with_out_buffer(func, 1024, b"x\0", 1, 2048, 4096, 100)
    assert rc == ord("x") - 123 and length == 1 and out is None


def test_ranges_in_memory_a_call_grew_are_inside(echo: Any) -> None:
    memory, func = echo
    for round_ in range(3):
        # In the newest page: inside memory only since the last call grew it.
        base = PAGE * round_ + 1024
        rc, length, out = memory.call_with_out_buffer(func, base, b"{1}\0", 3, base + 16,
                                                      base + 64, 32)
        assert (rc, length, out) == (0, 3, b"{1}"), round_


def test_a_trap_is_reported_once_and_the_next_call_is_clean(make_host: Any) -> None:
    trapping = _ECHO.replace("(drop (memory.grow (i32.const 1)))",
                             "(if (i32.eq (local.get $n) (i32.const 9)) (then unreachable))")
    probe = Probe(make_host(base_url="http://127.0.0.1:9/v1"),
                  bytes(wasmtime.wat2wasm(trapping)))
    previous = _native.enter_run(probe.run)
    try:
        func = probe.run.tool_function(0)
        assert func is not None
        memory = probe.run.memory
        with pytest.raises(_native.GuestCallError, match="unreachable"):
            memory.call_with_out_buffer(func, 1024, b"{23456789\0", 9, 2048, 4096, 100)
        # The trap slot was reset: a good call after a trap is not a trap.
        assert memory.call_with_out_buffer(func, 1024, b"{}\0", 2, 2048, 4096, 100) == \
            (0, 2, b"{}")
    finally:
        _native.enter_run(previous)
        probe.close()


def test_call4_wraps_a_u32_past_i32_range_as_call_i32_does(echo: Any) -> None:
    memory, func = echo
    memory.write(1024, b"{}")
    assert func.call4_i32(1024, 2, 2048, 4096) == func.call_i32(1024, 2, 2048, 4096) == 0
    # 0xFFFFFFF0 as the length word's pointer: the same 32 bits reach the
    # guest either way, and its store past memory traps alike.
    with pytest.raises(_native.GuestCallError) as four:
        func.call4_i32(1024, 2, 2048, 0xFFFFFFF0)
    with pytest.raises(_native.GuestCallError) as general:
        func.call_i32(1024, 2, 2048, 0xFFFFFFF0)
    assert str(four.value) == str(general.value)
    assert func.call4_i32(1024, 2, 2048, 4096) == 0  # and the next call is clean


@pytest.mark.parametrize("value", [0, 1, -1, 2**31 - 1, -2**31, 0x12345678])
def test_the_big_endian_result_reader_reads_a_raw_i32_as_wasm_wrote_it(value: int) -> None:
    # A raw value is little-endian on every host; RawFunc reads it through a
    # native cast only where that is the same (checked here byte by byte).
    raw = bytearray(16)
    raw[0:4] = value.to_bytes(4, "little", signed=True)
    assert _native._LittleEndianI32(memoryview(raw))[0] == value
