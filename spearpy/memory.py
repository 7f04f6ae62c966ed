"""Bounds-checked access to a guest's linear memory and the out-buffer protocol.

Every access re-reads the memory's length (one foreign call, no Python
wrapper), because a guest may grow its memory between two hostcalls. The base
address is read once: the Host's Engine is configured with
`memory_may_move = False`, so a memory grows in place and never relocates
(a moved memory would leave a cached base dangling and crash the host).
"""

from __future__ import annotations

import ctypes
from typing import TYPE_CHECKING

from spearpy import abi
from spearpy._native import memory_data, memory_data_size, memory_handles

if TYPE_CHECKING:
    import wasmtime

_U32_AT = ctypes.c_uint32.from_address
_string_at = ctypes.string_at
_memmove = ctypes.memmove
U32_MAX = 0xFFFFFFFF


class GuestFault(Exception):
    """A pointer or length outside guest memory (the hostcall returns EFAULT)."""


def _outside(ptr: int, length: int, size: int) -> GuestFault:
    if length < 0:
        return GuestFault(f"negative length {length}")
    return GuestFault(f"[{ptr}, {ptr + length}) is outside guest memory of {size} bytes")


class GuestMemory:
    __slots__ = ("_base_address", "_ctx", "_mem", "_memory", "_store")

    def __init__(self, store: wasmtime.Store, memory: wasmtime.Memory | None) -> None:
        # The references keep the addresses below valid.
        self._store = store
        self._memory = memory
        self._ctx, self._mem = memory_handles(store, memory) if memory is not None else (0, 0)
        self._base_address = 0

    @property
    def available(self) -> bool:
        return self._memory is not None

    def size(self) -> int:
        if self._memory is None:
            return 0
        return int(memory_data_size(self._ctx, self._mem))

    def _size(self) -> int:
        """The memory's byte length right now (it may have grown since the last look)."""
        if self._memory is None:
            raise GuestFault("the guest exports no memory")
        size: int = memory_data_size(self._ctx, self._mem)
        return size

    def _base(self) -> int:
        """The memory's host address (fixed: memories never move, see above).
        Call _size() first: it is what refuses a guest without a memory."""
        base = self._base_address
        if not base:
            base = self._base_address = memory_data(self._ctx, self._mem) or 0
        return base

    @staticmethod
    def _within(ptr: int, length: int, size: int) -> int:
        """`ptr` as an unsigned offset, if [ptr, ptr+length) lies inside `size`."""
        ptr &= U32_MAX  # wasm32 pointers are unsigned; i32 params arrive signed
        if length < 0 or ptr + length > size:
            raise _outside(ptr, length, size)
        return ptr

    def _address(self, ptr: int, length: int) -> int:
        """The host address of [ptr, ptr+length), checked against the memory's
        length as it is now (guest code can grow a memory, never shrink it)."""
        offset = self._within(ptr, length, self._size())  # first: it checks there is a memory
        return self._base() + offset

    def check(self, ptr: int, length: int) -> None:
        """GuestFault unless [ptr, ptr+length) is inside memory; nothing is
        copied (a hostcall checks bounds before it weighs a length's size)."""
        self._within(ptr, length, self._size())

    def check_pair(self, ptr1: int, len1: int, ptr2: int, len2: int) -> None:
        size = self._size()
        self._within(ptr1, len1, size)
        self._within(ptr2, len2, size)

    def read(self, ptr: int, length: int) -> bytes:
        address = self._address(ptr, length)
        return _string_at(address, length) if length else b""

    def read_pair(self, ptr1: int, len1: int, ptr2: int, len2: int) -> tuple[bytes, bytes]:
        """Two reads against one look at the memory (hostcalls taking two buffers)."""
        size = self._size()
        ptr1, ptr2 = self._within(ptr1, len1, size), self._within(ptr2, len2, size)
        base = self._base()
        return (_string_at(base + ptr1, len1) if len1 else b"",
                _string_at(base + ptr2, len2) if len2 else b"")

    def write_with_u32(self, ptr: int, data: bytes, word_ptr: int, word: int) -> None:
        """`data` at ptr and a u32 at word_ptr, against one look at the memory
        (a tool call's arguments and its output capacity)."""
        size = self._size()
        ptr, word_ptr = self._within(ptr, len(data), size), self._within(word_ptr, 4, size)
        base = self._base()
        if data:
            (ctypes.c_char * len(data)).from_address(base + ptr).raw = data
        _U32_AT(base + word_ptr).value = word & U32_MAX

    def read_counted(self, word_ptr: int, ptr: int, capacity: int) -> tuple[int, bytes | None]:
        """The u32 length at word_ptr and, when it is within `capacity`, that
        many bytes at ptr (None when it is not): a tool's output."""
        size = self._size()
        base = self._base()
        length: int = _U32_AT(base + self._within(word_ptr, 4, size)).value
        if length > capacity:
            return length, None
        ptr = self._within(ptr, length, size)
        return length, (ctypes.c_char * length).from_address(base + ptr).raw if length else b""

    def write(self, ptr: int, data: bytes) -> None:
        address = self._address(ptr, len(data))
        if data:
            _memmove(address, data, len(data))

    def read_u32(self, ptr: int) -> int:
        # Little-endian like wasm: every host spearpy supports is little-endian.
        value: int = _U32_AT(self._address(ptr, 4)).value
        return value

    def write_u32(self, ptr: int, value: int) -> None:
        _U32_AT(self._address(ptr, 4)).value = value & U32_MAX

    def write_out(self, out_ptr: int, out_len_ptr: int, payload: bytes) -> int:
        """spear-abi.md 1.1: capacity in, required length back on -28, data untouched."""
        capacity = self.read_u32(out_len_ptr)
        if len(payload) > capacity:
            self.write_u32(out_len_ptr, len(payload))
            return abi.ENOSPC
        self.write(out_ptr, payload)
        self.write_u32(out_len_ptr, len(payload))
        return len(payload)
