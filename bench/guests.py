"""The wasm the suite runs: the bench guest (WAT), the Extism echo plugin, a
large generated module for compile timings, and a live spearpy instance of
the bench guest driven the way a guest drives its hostcalls."""

from __future__ import annotations

import ctypes
import json
import struct
from functools import cache
from pathlib import Path
from typing import Any

import wasmtime

from spearpy import _native, abi
from spearpy.host import Host
from spearpy.testing.instance import LiveInstance

WAT_DIR = Path(__file__).parent / "wat"
ECHO, SUM = 0, 1  # table slots of the bench guest's tools

# Guest memory layout used by the suite (the guest's data is all below 60 KiB).
ROLE_PTR, CONTENT_PTR, LEN_PTR, ARENA_PTR, ARENA_LEN = 65536, 66560, 70000, 131072, 65536
RECV_PTR, RECV_LEN = 262144, 131072


@cache
def guest_wasm() -> bytes:
    return bytes(wasmtime.wat2wasm((WAT_DIR / "guest.wat").read_text()))


@cache
def extism_echo_wasm() -> bytes:
    return bytes(wasmtime.wat2wasm((WAT_DIR / "extism_echo.wat").read_text()))


def large_module(functions: int = 4000) -> bytes:
    """A valid module big enough that compiling it takes a visible while:
    `functions` functions of arithmetic and calls, ~1 MB of wasm."""
    parts = ["(module (memory 1)"]
    for i in range(functions):
        body = " ".join(
            f"(local.set $x (i32.add (i32.mul (local.get $x) (i32.const {k + 3})) "
            f"(i32.load (i32.and (local.get $x) (i32.const 65532)))))"
            for k in range(12))
        callee = f"(call $f{i - 1} (local.get $x))" if i else "(local.get $x)"
        parts.append(f"(func $f{i} (export \"f{i}\") (param $x i32) (result i32) {body} "
                     f"(i32.xor {callee} (local.get $x)))")
    parts.append(")")
    return bytes(wasmtime.wat2wasm("\n".join(parts)))


class LiveGuest(LiveInstance):
    """The bench guest instantiated in a real GuestRun; calls its exports as
    the guest itself would call the hostcalls."""

    def __init__(self, host: Host) -> None:
        super().__init__(host, host.load(guest_wasm(), "bench_guest.wasm"))
        self._raw: dict[str, _native.RawFunc] = {}

    def call(self, name: str, *args: int) -> int:
        """Enter an export the cheapest way (an unchecked call, ~1 us): a real
        guest makes its hostcalls from wasm and pays no Python -> wasm entry
        at all, so the harness should add as little of one as it can
        (wasmtime-py's generic `Func.__call__` costs 20-30 us)."""
        raw = self._raw.get(name)
        if raw is None:
            func = self.exports[name]
            assert isinstance(func, wasmtime.Func)
            kind = func.type(self.store)
            raw = self._raw[name] = _native.RawFunc(self.store, func, len(kind.params),
                                                     len(kind.results))
        previous = _native.enter_run(self.run)
        try:
            return raw.call_i32(*args)
        finally:
            _native.enter_run(previous)

    def put(self, ptr: int, data: bytes) -> tuple[int, int]:
        self.run.memory.write(ptr, data)
        return ptr, len(data)

    def session(self, *, tools: bool = True, max_iterations: int = 128) -> int:
        """A chat session with the sum tool registered and an arena declared."""
        fd = int(self.call("p_cchat_create"))
        self.set_param(fd, "tool_arena_ptr", ARENA_PTR)
        self.set_param(fd, "tool_arena_len", ARENA_LEN)
        self.set_param(fd, "max_iterations", max_iterations)
        self.set_param(fd, "max_tool_calls", 10000)
        if tools:
            schema = json.dumps({"type": "function", "function": {
                "name": "sum", "description": "add two integers",
                "parameters": {"type": "object", "properties": {
                    "a": {"type": "integer"}, "b": {"type": "integer"}},
                    "required": ["a", "b"]}}}).encode()
            ptr, length = self.put(CONTENT_PTR, schema)
            rc = self.call("p_cchat_write_fn", fd, SUM, ptr, length)
            assert rc == 0, rc
        return fd

    def set_param(self, fd: int, key: str, value: Any) -> None:
        ptr, length = self.put(CONTENT_PTR, json.dumps({"key": key, "value": value}).encode())
        self.run.memory.write(LEN_PTR, struct.pack("<I", length))
        rc = self.call("p_cchat_ctl", fd, abi.CTL_SET_PARAM, ptr, LEN_PTR)
        assert rc == 0, (key, rc)

    def write_msg(self, fd: int, role: str, content: str) -> None:
        rp, rl = self.put(ROLE_PTR, role.encode())
        cp, cl = self.put(CONTENT_PTR, content.encode())
        rc = self.call("p_cchat_write_msg", fd, rp, rl, cp, cl)
        assert rc == 0, rc

    def send(self, fd: int, flags: int = abi.SEND_AUTO_TOOL_CALL) -> int:
        return int(self.call("p_cchat_send", fd, flags))

    def recv(self, rfd: int) -> bytes:
        self.run.memory.write(LEN_PTR, struct.pack("<I", RECV_LEN))
        rc = int(self.call("p_cchat_recv", rfd, RECV_PTR, LEN_PTR))
        assert rc > 0, rc
        return self.run.memory.read(RECV_PTR, rc)

    def close_fd(self, fd: int) -> None:
        self.call("p_cchat_close", fd)


class RawToolCall:
    """A bench guest tool called the cheapest way wasmtime allows: an unchecked
    call with a preallocated value array and raw memory copies, no checks (the
    floor of P1 and P5)."""

    def __init__(self, guest: LiveGuest, slot: int) -> None:
        func = guest.run.tool_function(slot)
        assert func is not None
        self.func = func
        memory = guest.exports["memory"]
        assert isinstance(memory, wasmtime.Memory)
        self.span = _native.MemorySpan(guest.store, memory)

    def __call__(self, arguments: str) -> str:
        data = arguments.encode()
        out_ptr = (ARENA_PTR + len(data) + 1 + 7) & ~7
        len_ptr = ARENA_PTR + ARENA_LEN - 8
        base, _size = self.span()
        ctypes.memmove(base + ARENA_PTR, data + b"\0", len(data) + 1)
        ctypes.c_uint32.from_address(base + len_ptr).value = len_ptr - out_ptr
        self.func.call_i32(ARENA_PTR, len(data), out_ptr, len_ptr)
        base, _size = self.span()
        length = ctypes.c_uint32.from_address(base + len_ptr).value
        return ctypes.string_at(base + out_ptr, length).decode()
