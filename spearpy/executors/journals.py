"""Journal stores shared by the runs of one process.

`JournalSpec.locate()` opens its store afresh for every run: for SQLite
that is a directory check, three connections (tables, the existence check,
the writer) and the schema script, ~0.4 ms of a short run's ~1.3 ms (bench
`SV`, where every run of the service is journaled). A `SharedJournalSpec`
locates its store in a per-process table instead: the runs of a service,
or of one of its worker processes, share a store (its read connection, its
checked tables); each run still gets a writer connection and lock of its
own. It pickles as a plain spec does, and a worker process shares its
stores among its own runs.

A shared store is never closed by a run (`read_start` closes only its read
connection, which the next read opens again). It is opened again when its
database file is no longer the one it opened (removed, replaced).
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from dataclasses import dataclass

from spearpy.durable import JournalSpec
from spearpy.journal import JournalStore, SyncPolicy, open_store

_PREFIX = "sqlite:"
_MAX_STORES = 8  # distinct databases kept open per process; the oldest is closed past it
_lock = threading.Lock()
_stores: OrderedDict[str, tuple[tuple[int, int], JournalStore]] = OrderedDict()


@dataclass(frozen=True, slots=True)
class SharedJournalSpec(JournalSpec):
    """A JournalSpec whose SQLite store is this process's shared one."""

    def locate(self) -> tuple[JournalStore, str]:
        text = os.fspath(self.path)
        if not text.startswith(_PREFIX) or self.journal_id is None:
            return JournalSpec.locate(self)
        return shared_store(text), self.journal_id


def shared_spec(store: str, journal_id: str, sync: SyncPolicy) -> SharedJournalSpec:
    return SharedJournalSpec(store, journal_id=journal_id, sync=sync)


def shared_store(spec: str) -> JournalStore:
    """The store `spec` (`sqlite:PATH`) names, opened once per process."""
    path = spec[len(_PREFIX):]
    with _lock:
        entry = _stores.get(spec)
        if entry is not None and entry[0] == _identity(path):
            _stores.move_to_end(spec)
            return entry[1]
    store = open_store(spec)  # outside the lock: it creates the file and its tables
    identity = _identity(path)
    with _lock:
        old = _stores.pop(spec, None)
        _stores[spec] = (identity, store)
        evicted = [old[1]] if old is not None else []
        while len(_stores) > _MAX_STORES:
            evicted.append(_stores.popitem(last=False)[1][1])
    for gone in evicted:
        # Only its read connection closes; a run still writing through it
        # holds a connection of its own, and a read opens one again.
        gone.close()
    return store


def _identity(path: str) -> tuple[int, int]:
    try:
        stat = os.stat(path)
    except OSError:
        return (-1, -1)
    return (stat.st_dev, stat.st_ino)
