"""A run without a wasm guest: hostcalls and the driver on a `RunContext`
whose guest memory is a bytearray.

Hostcall functions take the run's context and the guest's integer
arguments; with `fake_context()` a test calls them directly, writing and
reading the memory the way a guest would, with no Host, no wasmtime Store
and no module. What the run reaches of a Host (backends, tool sources) is
what the test hands to `RunServices`: a real backend to a loopback model
keeps the upstream path real.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from typing import TYPE_CHECKING

from spearpy.config import HostConfig
from spearpy.context import RunContext, RunOptions, RunServices
from spearpy.memory import GuestFault, GuestMemory
from spearpy.tools.sources import HostTools

if TYPE_CHECKING:
    from spearpy.backends.base import Backend


class BytesMemory(GuestMemory):
    """Guest memory over a bytearray of a fixed size: every check, read and
    write of GuestMemory runs unchanged against it."""

    __slots__ = ("data",)

    def __init__(self, size: int = 1 << 16) -> None:
        super().__init__(None, None)
        self.data = bytearray(size)
        self._bytes = (ctypes.c_char * size).from_buffer(self.data)
        self._view = memoryview(self._bytes).cast("B")
        self._known = size

    @property
    def available(self) -> bool:
        return True

    def size(self) -> int:
        return len(self.data)

    def _size(self) -> int:
        return len(self.data)

    def put(self, ptr: int, data: bytes | str) -> tuple[int, int]:
        """Write `data` at `ptr` as a guest would; (ptr, its length)."""
        raw = data.encode() if isinstance(data, str) else data
        if ptr < 0 or ptr + len(raw) > len(self.data):
            raise GuestFault(f"[{ptr}, {ptr + len(raw)}) is outside the fake memory")
        self.data[ptr:ptr + len(raw)] = raw
        return ptr, len(raw)


def _no_backend(_name: object, _model: object, _session: object
                ) -> tuple[Backend | None, str | None]:
    return None, "this test context has no backend"


def fake_context(*, config: HostConfig | None = None, options: RunOptions | None = None,
                 backend: Backend | None = None, tools: HostTools | None = None,
                 key_envs: Callable[[], list[str]] = list, memory_bytes: int = 1 << 16,
                 ) -> RunContext:
    """A RunContext with a BytesMemory (`ctx.memory`), answering every
    backend request with `backend` (none: a bad_backend answer)."""
    config = config or HostConfig(cache_dir=None)

    def backend_for(_name: object, _model: object, _session: object
                    ) -> tuple[Backend | None, str | None]:
        return backend, None

    services = RunServices(backend_for=backend_for if backend is not None else _no_backend,
                           tools=tools or HostTools(), limit_policy=config.limit_policy(),
                           key_envs=key_envs)
    return RunContext(config, options or RunOptions(capture_output=True), services,
                      BytesMemory(memory_bytes))


__all__ = ["BytesMemory", "fake_context"]
