"""Bounds-checked access to a guest's linear memory and the out-buffer protocol.

Every read and write re-reads the memory's base and length, because a guest
may grow (and on some configurations move) its memory between two hostcalls;
a cached view would dangle and crash the host.
"""

from __future__ import annotations

import ctypes
import struct
from typing import TYPE_CHECKING

from spearpy import abi
from spearpy._native import memory_span

if TYPE_CHECKING:
    import wasmtime

_U32 = struct.Struct("<I")
U32_MAX = 0xFFFFFFFF


class GuestFault(Exception):
    """A pointer or length outside guest memory (the hostcall returns EFAULT)."""


class GuestMemory:
    __slots__ = ("_memory", "_store")

    def __init__(self, store: wasmtime.Store, memory: wasmtime.Memory | None) -> None:
        self._store = store
        self._memory = memory

    @property
    def available(self) -> bool:
        return self._memory is not None

    def size(self) -> int:
        if self._memory is None:
            return 0
        return memory_span(self._store, self._memory)[1]

    def _address(self, ptr: int, length: int) -> int:
        if self._memory is None:
            raise GuestFault("the guest exports no memory")
        if length < 0:
            raise GuestFault(f"negative length {length}")
        ptr &= U32_MAX  # wasm32 pointers are unsigned; i32 params arrive signed
        base, size = memory_span(self._store, self._memory)
        if ptr + length > size:
            raise GuestFault(f"[{ptr}, {ptr + length}) is outside guest memory of {size} bytes")
        return base + ptr

    def read(self, ptr: int, length: int) -> bytes:
        address = self._address(ptr, length)
        return ctypes.string_at(address, length) if length else b""

    def write(self, ptr: int, data: bytes) -> None:
        address = self._address(ptr, len(data))
        if data:
            ctypes.memmove(address, data, len(data))

    def read_u32(self, ptr: int) -> int:
        value: int = _U32.unpack(self.read(ptr, 4))[0]
        return value

    def write_u32(self, ptr: int, value: int) -> None:
        self.write(ptr, _U32.pack(value & U32_MAX))

    def read_text(self, ptr: int, length: int) -> str | None:
        """UTF-8 text at ptr, or None when the bytes are not UTF-8."""
        try:
            return self.read(ptr, length).decode("utf-8")
        except UnicodeDecodeError:
            return None

    def write_out(self, out_ptr: int, out_len_ptr: int, payload: bytes) -> int:
        """spear-abi.md 1.1: capacity in, required length back on -28, data untouched."""
        capacity = self.read_u32(out_len_ptr)
        if len(payload) > capacity:
            self.write_u32(out_len_ptr, len(payload))
            return abi.ENOSPC
        self.write(out_ptr, payload)
        self.write_u32(out_len_ptr, len(payload))
        return len(payload)
