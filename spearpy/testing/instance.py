"""A guest instantiated in a real GuestRun, driven export by export.

For tests of the hostcall layer and for benchmarks that time one hostcall or
one tool call: the caller calls the guest's exports itself (no `_start`), and
every hostcall they make is served by the run, with its memory, fd table,
limits and backends, exactly as in `Host.run`.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

import wasmtime

from spearpy import _native
from spearpy.context import RunOptions
from spearpy.instance import GuestRun

if TYPE_CHECKING:
    from spearpy.host import Host, LoadedModule


class LiveInstance:
    def __init__(self, host: Host, module: LoadedModule, options: RunOptions | None = None) -> None:
        self.host = host
        self.run = GuestRun(host.engine, host.config, module,
                            options or RunOptions(capture_output=True), host.services)
        self._scratch = tempfile.TemporaryDirectory(prefix="spearpy-live-")
        self.instance = self.run.instantiate(Path(self._scratch.name))
        self.store = self.run.store
        self.exports = self.instance.exports(self.store)

    def call(self, name: str, *args: int) -> Any:
        """Call export `name` with this run current, as `Host.run` would."""
        func = self.exports[name]
        assert isinstance(func, wasmtime.Func)
        previous = _native.enter_run(self.run)
        try:
            with self.host.in_progress(self.run):  # its deadlines and cancels tick
                return func(self.store, *args)
        finally:
            _native.enter_run(previous)

    def close(self) -> None:
        """Close the guest's sessions (their transcripts are kept) and the scratch dir."""
        self.run.close_all_sessions()
        self._scratch.cleanup()
