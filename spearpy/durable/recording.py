"""Guest memory that remembers what a hostcall wrote into it.

A journaled outside-world hostcall runs against this wrapper of the run's
memory, so its answer is its result plus every byte range it wrote (a clock
value, a frame, a ready list), whatever the hostcall: replay writes the same
bytes back without calling it.
"""

from __future__ import annotations

from spearpy.memory import GuestMemory


class RecordingMemory(GuestMemory):
    __slots__ = ("inner", "writes")

    def __init__(self, inner: GuestMemory) -> None:
        # Shares the inner memory's window: reads and bounds are its own.
        super().__init__(None, None)
        for name in GuestMemory.__slots__:
            setattr(self, name, getattr(inner, name))
        self.inner = inner
        self.writes: list[tuple[int, bytes]] = []

    @property
    def available(self) -> bool:
        return self.inner.available

    def size(self) -> int:
        return self.inner.size()

    def _size(self) -> int:
        size: int = self.inner._size()
        self._known = size
        return size

    def write(self, ptr: int, data: bytes) -> None:
        self.inner.write(ptr, data)
        self.writes.append((ptr & 0xFFFFFFFF, bytes(data)))

    def write_u32(self, ptr: int, value: int) -> None:
        self.write(ptr, (value & 0xFFFFFFFF).to_bytes(4, "little"))
