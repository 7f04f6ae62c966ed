"""The hostcall trampoline (_native.define_hostcall) at its edges: params as
the guest passed them, results wrapped to the import's width, None as 0, a
host bug as the errno, a HostInterrupt as a trap; called from real wasm."""

from __future__ import annotations

from typing import Any

import pytest
import wasmtime

from spearpy import _native
from spearpy.instance import GuestRun

WAT = """
(module
  (import "t" "i32" (func $i32 (param i32 i32) (result i32)))
  (import "t" "i64" (func $i64 (result i64)))
  (func (export "call_i32") (param i32 i32) (result i32)
    (call $i32 (local.get 0) (local.get 1)))
  (func (export "call_i64") (result i64) (call $i64)))
"""


class _Linked:
    def __init__(self, i32: Any, i64: Any) -> None:
        engine = wasmtime.Engine()
        linker = wasmtime.Linker(engine)
        _native.define_hostcall(linker, "t", "i32", (_native.I32, _native.I32),
                                (_native.I32,), i32, -5)
        _native.define_hostcall(linker, "t", "i64", (), (_native.I64,), i64, -5)
        self.store = wasmtime.Store(engine)
        instance = linker.instantiate(self.store, wasmtime.Module(engine, WAT))
        self.exports = instance.exports(self.store)

    def call(self, name: str, *args: int) -> Any:
        func = self.exports[name]
        assert isinstance(func, wasmtime.Func)
        return func(self.store, *args)


def test_params_arrive_signed_and_results_wrap_to_width(probe: Any) -> None:
    run = probe().run
    seen: list[tuple[Any, ...]] = []
    answers = iter([7, 0xFFFFFFFF, 1 << 31, None, -(1 << 31)])
    wide = iter([(1 << 64) - 1, 1 << 63, -3])

    def i32(got: GuestRun, a: int, b: int) -> int | None:
        seen.append((got, a, b))
        return next(answers)

    linked = _Linked(i32, lambda _run: next(wide))
    previous = _native.enter_run(run)
    try:
        assert linked.call("call_i32", 1, -2) == 7
        assert seen == [(run, 1, -2)]
        assert linked.call("call_i32", 0x7FFFFFFF, -(1 << 31)) == -1  # u32 max: same bits
        assert seen[-1][1:] == (0x7FFFFFFF, -(1 << 31))
        assert linked.call("call_i32", 0, 0) == -(1 << 31)
        assert linked.call("call_i32", 0, 0) == 0  # None
        assert linked.call("call_i32", 0, 0) == -(1 << 31)
        assert linked.call("call_i64") == -1
        assert linked.call("call_i64") == -(1 << 63)
        assert linked.call("call_i64") == -3
    finally:
        _native.enter_run(previous)


def test_a_host_bug_is_the_errno_and_an_interrupt_a_trap(probe: Any,
                                                         host_bugs: list[str]) -> None:
    run = probe().run

    def broken(_run: GuestRun, _a: int, _b: int) -> int:
        raise KeyError("a bug in the host")

    def interrupted(_run: GuestRun) -> int:
        raise _native.HostInterrupt("cancelled", "stopped for the test")

    linked = _Linked(broken, interrupted)
    previous = _native.enter_run(run)
    try:
        assert linked.call("call_i32", 1, 2) == -5
        assert host_bugs == ["t.i32: KeyError: 'a bug in the host'"]
        with pytest.raises(wasmtime.WasmtimeError, match="stopped for the test"):
            linked.call("call_i64")
    finally:
        _native.enter_run(previous)
