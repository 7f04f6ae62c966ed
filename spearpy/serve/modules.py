"""The modules a service may run: `*.wasm` files directly in --modules DIR.

A request names a module, never a path. A name is checked twice: by its
spelling (no separators, no leading dot), and by where it really leads
(after every symlink, still a regular file directly inside DIR), so neither
`../x.wasm` nor a symlink pointing out of the directory reaches a file.
"""

from __future__ import annotations

import asyncio
import hashlib
import re
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from spearpy.errors import SpearpyError
from spearpy.inspect import inspect_module
from spearpy.serve.problems import Problem

if TYPE_CHECKING:
    from spearpy.host import Host, LoadedModule
    from spearpy.serve.schema import RunRequest

_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+-]{0,127}")  # full matches only
MAX_MODULE_BYTES = 256 << 20


class ModuleDir:
    def __init__(self, directory: str | Path) -> None:
        self.root = Path(directory).resolve(strict=True)
        if not self.root.is_dir():
            raise ValueError(f"--modules {directory}: not a directory")
        self._lock = threading.Lock()
        self._reports: dict[str, dict[str, Any]] = {}  # sha256 -> inspect report

    def path_of(self, name: str, missing: int = 404) -> tuple[str, Path]:
        """The real file behind `name` (with or without `.wasm`), or a Problem
        (`missing`: the status for a name that leads to no module). A symlink
        to a module in the directory is the module under another name."""
        if not isinstance(name, str) or not _NAME.fullmatch(name):
            raise Problem(422, f"module names are file names in the modules directory, "
                               f"like agent.wasm: {name!r} is not one", slug="bad-module-name")
        file_name = name if name.endswith(".wasm") else name + ".wasm"
        try:
            real = (self.root / file_name).resolve(strict=True)
        except (OSError, RuntimeError):  # missing, or a symlink loop
            real = None
        if real is None or real.parent != self.root or not real.is_file() or \
                real.suffix != ".wasm":
            raise Problem(missing, f"no module {file_name!r} in the modules directory; "
                               "GET /v1/modules lists them", slug="unknown-module")
        return file_name, real

    def names(self) -> list[str]:
        found = []
        for entry in sorted(self.root.iterdir()):
            try:
                self.path_of(entry.name)
            except Problem:
                continue
            found.append(entry.name)
        return found

    def read(self, name: str, missing: int = 404) -> tuple[str, bytes]:
        file_name, path = self.path_of(name, missing)
        with path.open("rb") as f:
            wasm = f.read(MAX_MODULE_BYTES + 1)
        if len(wasm) > MAX_MODULE_BYTES:
            raise Problem(422, f"module {file_name!r} is larger than {MAX_MODULE_BYTES} bytes",
                          slug="module-too-large")
        return file_name, wasm

    def describe(self, name: str) -> dict[str, Any]:
        """What `spearpy inspect --json` says of the module, plus its name,
        size and sha256; cached by content, so a replaced file is inspected anew."""
        file_name, wasm = self.read(name)
        digest = hashlib.sha256(wasm).hexdigest()
        with self._lock:
            report = self._reports.get(digest)
        if report is None:
            try:
                report = inspect_module(wasm)
            except SpearpyError as exc:
                report = {"runnable": False, "problems": [str(exc)]}
            with self._lock:
                self._reports[digest] = report
        return {"name": file_name, "bytes": len(wasm), "sha256": digest, **report}


Loaded = tuple["Host", "LoadedModule", bytes]  # the run's Host, its module there, the bytes
_Key = tuple[str, str | None, str | None]


class RecentModules:
    """What the last runs of a module loaded, for `ttl` seconds.

    Reading and loading a module takes a hop off the event loop (file I/O,
    hashing); under load every hop waits for the GIL behind the guests'
    threads, the largest part of a short run's time in the service. A module
    file replaced on disk is picked up once its entry is `ttl` old.

    Requests that miss while a load of the same module is on its way wait
    for that one: a burst of 64 runs arriving together made ~50 hops off
    the loop, each reading and hashing the file again (bench `SV`).
    On the event loop only."""

    def __init__(self, ttl: float = 1.0, size: int = 64) -> None:
        self._ttl = ttl
        self._size = size
        self._entries: dict[_Key, tuple[float, Loaded]] = {}
        self._loading: dict[_Key, asyncio.Future[Loaded]] = {}

    def get(self, run: RunRequest) -> Loaded | None:
        entry = self._entries.get(_key(run))
        if entry is None or time.monotonic() - entry[0] > self._ttl:
            return None
        return entry[1]

    async def load(self, run: RunRequest, loader: Callable[[], Loaded]) -> Loaded:
        """The module's entry, else `loader()` on a thread, shared by every
        request for the same module that misses meanwhile. A failed load is
        each waiter's error and is not kept."""
        loaded = self.get(run)
        if loaded is not None:
            return loaded
        key = _key(run)
        pending = self._loading.get(key)
        if pending is None:
            # A task of its own: a waiter whose client hangs up (its request
            # cancelled) must not cancel the others' load.
            pending = self._loading[key] = asyncio.ensure_future(asyncio.to_thread(loader))
            pending.add_done_callback(lambda done: self._loaded(key, done))
        return await asyncio.shield(pending)

    def _loaded(self, key: _Key, done: asyncio.Future[Loaded]) -> None:
        if self._loading.get(key) is done:
            del self._loading[key]
        if not done.cancelled() and done.exception() is None:  # retrieved: no warning
            self._put(key, done.result())

    def _put(self, key: _Key, loaded: Loaded) -> None:
        now = time.monotonic()
        # Old entries go, so no module's bytes stay long after its last run.
        self._entries = {key: entry for key, entry in self._entries.items()
                         if now - entry[0] <= self._ttl}
        if len(self._entries) >= self._size:
            self._entries.clear()  # many names in a second: not worth keeping
        self._entries[key] = (now, loaded)


def _key(run: RunRequest) -> _Key:
    return run.module, run.model, run.backend
