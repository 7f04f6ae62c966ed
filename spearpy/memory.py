"""Bounds-checked access to a guest's linear memory and the out-buffer protocol.

A guest may grow its memory between two hostcalls, never shrink it: an access
is checked against the largest length seen so far and the length is read
afresh (one foreign call) only when that check fails. The base address is read
once: the Host's Engine is configured with `memory_may_move = False`, so a
memory grows in place and never relocates (a moved memory would leave the
cached window dangling and crash the host).
"""

from __future__ import annotations

import ctypes
import struct
from typing import TYPE_CHECKING

from spearpy import abi
from spearpy._native import memory_data, memory_data_size, memory_handles
from spearpy.errors import SpearpyError

if TYPE_CHECKING:
    import wasmtime

    from spearpy._native import RawFunc

U32_MAX = 0xFFFFFFFF


class GuestFault(SpearpyError):
    """A pointer or length outside guest memory (the hostcall returns EFAULT)."""


def _outside(ptr: int, length: int, size: int) -> GuestFault:
    if length < 0:
        return GuestFault(f"negative length {length}")
    return GuestFault(f"[{ptr}, {ptr + length}) is outside guest memory of {size} bytes")


# The most a wasm32 memory can address: the length of the window below.
_WINDOW_BYTES = 1 << 32
_U32 = struct.Struct("<I")


class GuestMemory:
    """Checked reads and writes of one run's linear memory.

    Two facts keep the common path to a few Python operations, with no
    foreign call: a memory never moves (the Engine's `memory_may_move` is off),
    so one window (a memoryview of the whole wasm32 address range at the base)
    serves every access; and a memory never shrinks, so a length read once is
    a lower bound forever: an access inside it is inside the memory, and only
    one past it pays for a fresh read of the length. Every index into the
    window is checked against a length the memory has or had, never against
    the window's own (most of it is not mapped).
    """

    __slots__ = ("_bytes", "_ctx", "_known", "_mem", "_memory", "_store", "_view")

    def __init__(self, store: wasmtime.Store | None, memory: wasmtime.Memory | None) -> None:
        # The references keep the addresses below valid.
        self._store = store
        self._memory = memory
        self._ctx, self._mem = (memory_handles(store, memory)
                                if store is not None and memory is not None else (0, 0))
        self._known = 0  # bytes the memory is known to have (it only grows)
        self._view: memoryview | None = None
        # The same window as a ctypes array: slicing it is the cheapest read
        # into bytes (one copy, no intermediate view).
        self._bytes: ctypes.Array[ctypes.c_char] | None = None

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
        self._known = size
        return size

    def _window(self) -> memoryview:
        """The memoryview at the memory's base (fixed: memories never move).
        Call it only after a check against the memory's length has passed:
        that is what refuses a guest without a memory."""
        view = self._view
        if view is None:
            base = memory_data(self._ctx, self._mem) or 0
            window = self._bytes = (ctypes.c_char * _WINDOW_BYTES).from_address(base)
            view = self._view = memoryview(window).cast("B")
        return view

    def _slice(self, ptr: int, length: int) -> bytes:
        """Bytes at a checked [ptr, ptr+length)."""
        window = self._bytes
        if window is None:
            self._window()
            window = self._bytes
            assert window is not None
        data: bytes = window[ptr:ptr + length]  # type: ignore[assignment]  # c_char: bytes
        return data

    def _fit(self, ptr: int, length: int) -> int:
        """`ptr` as an unsigned offset, if [ptr, ptr+length) lies inside the
        memory; the length is read afresh only when the known one is short."""
        ptr &= U32_MAX  # wasm32 pointers are unsigned; i32 params arrive signed
        if length < 0 or ptr + length > self._known:
            size = self._size()  # first: it checks there is a memory
            if length < 0 or ptr + length > size:
                raise _outside(ptr, length, size)
        return ptr

    def check(self, ptr: int, length: int) -> None:
        """GuestFault unless [ptr, ptr+length) is inside memory; nothing is
        copied (a hostcall checks bounds before it weighs a length's size)."""
        self._fit(ptr, length)

    def check_pair(self, ptr1: int, len1: int, ptr2: int, len2: int) -> None:
        self._fit(ptr1, len1)
        self._fit(ptr2, len2)

    def read(self, ptr: int, length: int) -> bytes:
        ptr = self._fit(ptr, length)
        return self._slice(ptr, length)

    def read_pair(self, ptr1: int, len1: int, ptr2: int, len2: int) -> tuple[bytes, bytes]:
        """Two reads (hostcalls taking two buffers): both checked first."""
        # Inlined _fit and _slice: this is every cchat_write_msg's path.
        ptr1 &= U32_MAX
        ptr2 &= U32_MAX
        if len1 < 0 or len2 < 0 or ptr1 + len1 > self._known or ptr2 + len2 > self._known:
            ptr1, ptr2 = self._fit(ptr1, len1), self._fit(ptr2, len2)
        window = self._bytes
        if window is None:
            return self._slice(ptr1, len1), self._slice(ptr2, len2)
        first: bytes = window[ptr1:ptr1 + len1]  # type: ignore[assignment]
        second: bytes = window[ptr2:ptr2 + len2]  # type: ignore[assignment]
        return first, second

    def call_with_out_buffer(self, func: RawFunc, ptr: int, data: bytes, nargs: int,
                             out_ptr: int, word_ptr: int,
                             capacity: int) -> tuple[int, int, bytes | None]:
        """A call through SPEAR's buffers (a tool call): `data` at ptr and
        `capacity` as the u32 at word_ptr, then func(ptr, nargs, out_ptr,
        word_ptr). Returns (its result, the u32 at word_ptr after it, and
        when the result is 0 and that length is within capacity, that many
        bytes at out_ptr; else None).

        The three ranges are checked before the call, against one known
        length: a memory only grows, so they are still inside after it.
        One method rather than a write, a call and a read: this is every
        guest tool call's path."""
        size = len(data)
        known = self._known
        view = self._view
        # A negative pointer (an i32 standing for a u32) takes the slow
        # path, which masks it: comparisons cost less than three masks.
        # (a | b | c | d) < 0 exactly when one of the four ints is.
        if view is None or ptr | out_ptr | word_ptr | capacity < 0 or \
                ptr + size > known or word_ptr + 4 > known or out_ptr + capacity > known:
            ptr, word_ptr = self._fit(ptr, size), self._fit(word_ptr, 4)
            out_ptr = self._fit(out_ptr, capacity)
            view = self._window()
        view[ptr:ptr + size] = data
        _U32.pack_into(view, word_ptr, capacity & U32_MAX)
        rc = func.call4_i32(ptr, nargs, out_ptr, word_ptr)
        length: int = _U32.unpack_from(view, word_ptr)[0]
        if rc != 0 or length > capacity:
            return rc, length, None
        window = self._bytes
        assert window is not None  # made with the view
        out: bytes = window[out_ptr:out_ptr + length]  # type: ignore[assignment]  # c_char: bytes
        return rc, length, out

    def write(self, ptr: int, data: bytes) -> None:
        ptr = self._fit(ptr, len(data))
        self._window()[ptr:ptr + len(data)] = data

    def read_u32(self, ptr: int) -> int:
        # Little-endian like wasm: every host spearpy supports is little-endian.
        ptr = self._fit(ptr, 4)
        value: int = _U32.unpack_from(self._window(), ptr)[0]
        return value

    def write_u32(self, ptr: int, value: int) -> None:
        ptr = self._fit(ptr, 4)
        _U32.pack_into(self._window(), ptr, value & U32_MAX)

    def write_out(self, out_ptr: int, out_len_ptr: int, payload: bytes) -> int:
        """spear-abi.md 1.1: capacity in, required length back on -28, data untouched."""
        capacity = self.read_u32(out_len_ptr)
        if len(payload) > capacity:
            self.write_u32(out_len_ptr, len(payload))
            return abi.ENOSPC
        self.write(out_ptr, payload)
        self.write_u32(out_len_ptr, len(payload))
        return len(payload)
