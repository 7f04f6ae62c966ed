"""The Host's in-memory cache of compiled modules: LRU, bounded by bytes.

A compiled module's resident cost is its machine code and metadata, which is
what `wasmtime.Module.serialize()` writes out; the cache weighs each module by
that length (the `.cwasm` file's size when it came from the disk cache) and
evicts the least recently loaded ones past `HostConfig.module_cache_bytes`.
Eviction only drops the cache's reference: a run holding a `LoadedModule`
keeps its code alive until it ends, and the next load compiles (or reads the
disk cache) again.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from spearpy.host import LoadedModule


@dataclass(frozen=True, slots=True)
class ModuleCacheStats:
    """Counts since the cache was made, and what it holds now."""

    hits: int
    misses: int
    evictions: int
    bytes: int
    entries: int
    max_bytes: int


class ModuleCache:
    """Digest -> LoadedModule, least recently used first out. Thread-safe."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._entries: OrderedDict[str, tuple[LoadedModule, int]] = OrderedDict()
        self._bytes = 0
        self._hits = self._misses = self._evictions = 0
        self._lock = threading.Lock()

    def get(self, digest: str) -> LoadedModule | None:
        with self._lock:
            entry = self._entries.get(digest)
            if entry is None:
                self._misses += 1
                return None
            self._entries.move_to_end(digest)
            self._hits += 1
            return entry[0]

    def put(self, loaded: LoadedModule, nbytes: int) -> LoadedModule:
        """Keep `loaded` (weighing `nbytes`) and return the module to use: the
        one already cached under its digest if another thread got there
        first. A module larger than the whole bound is returned, not kept."""
        with self._lock:
            entry = self._entries.get(loaded.sha256)
            if entry is not None:
                self._entries.move_to_end(loaded.sha256)
                return entry[0]
            if nbytes > self.max_bytes:
                self._evictions += 1
                return loaded
            self._entries[loaded.sha256] = (loaded, nbytes)
            self._bytes += nbytes
            while self._bytes > self.max_bytes:
                _digest, (_old, old_bytes) = self._entries.popitem(last=False)
                self._bytes -= old_bytes
                self._evictions += 1
            return loaded

    def __contains__(self, digest: object) -> bool:
        with self._lock:
            return digest in self._entries

    def stats(self) -> ModuleCacheStats:
        with self._lock:
            return ModuleCacheStats(self._hits, self._misses, self._evictions, self._bytes,
                                    len(self._entries), self.max_bytes)
