"""One guest run of a wasm module: its Store, WASI context and exports, on
top of the RunContext every run has (spearpy/context.py)."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import TYPE_CHECKING

import wasmtime

from spearpy import _native
from spearpy.capture import OutputCapture
from spearpy.config import HostConfig
from spearpy.context import RunContext, RunOptions, RunServices
from spearpy.endings import (
    MAX_MEMORIES,
    MAX_TABLE_ELEMENTS,
    MAX_TABLES,
    classify_error,
    classify_trap,
)
from spearpy.hostcalls import run_ended, run_started
from spearpy.memory import GuestMemory
from spearpy.observe.events import RUN_END, RUN_START
from spearpy.outcome import Outcome, RunResult, exit_code_for
from spearpy.scratch import scratch_dir
from spearpy.secret_env import guest_env

if TYPE_CHECKING:
    from spearpy.modload import LoadedModule

_TOOL_SIGNATURE = ([wasmtime.ValType.i32()] * 4, [wasmtime.ValType.i32()])
_UNLIMITED_FUEL = (1 << 63) - 1
# One entry of tool_function's cache (the RawFunc, or None, and its slot).
TOOL_FUNC_BYTES = 256


class GuestRun(RunContext):
    """One execution of a guest module. Used by one thread at a time; other
    threads only reach `interrupts` (cancel) and fds' wakers."""

    def __init__(self, engine: wasmtime.Engine, config: HostConfig, module: LoadedModule,
                 options: RunOptions, services: RunServices) -> None:
        self.store = wasmtime.Store(engine)
        super().__init__(config, options, services, GuestMemory(self.store, None))
        self.module = module
        self._output: OutputCapture | None = None
        self._table: wasmtime.Table | None = None
        run_started(self)

    # ---- tools -----------------------------------------------------------

    def tool_function(self, index: int) -> _native.RawFunc | None:
        if index in self.tool_funcs:
            return self.tool_funcs[index]
        table = self._table
        if table is None or not 0 <= index < table.size(self.store):
            # Not cached: a guest asking for every i32 would grow the cache
            # by an entry per refused call.
            return None
        func = None
        try:
            item = table.get(self.store, index)
        except wasmtime.WasmtimeError:
            item = None
        if isinstance(item, wasmtime.Func):
            ty = item.type(self.store)
            if ([str(p) for p in ty.params], [str(r) for r in ty.results]) == (
                [str(p) for p in _TOOL_SIGNATURE[0]], [str(r) for r in _TOOL_SIGNATURE[1]]
            ):
                func = _native.RawFunc(self.store, item, 4, 1)
        # Kept to the run's end, one per table slot asked (up to
        # MAX_TABLE_ELEMENTS): charged like anything else the host keeps.
        self.tool_funcs[index] = func
        self.charge(TOOL_FUNC_BYTES, "a tool function lookup")
        return func

    # ---- lifecycle -------------------------------------------------------

    def _wasi(self, scratch: Path) -> wasmtime.WasiConfig:
        wasi = wasmtime.WasiConfig()
        wasi.argv = [self.module.name, *self.options.argv]
        # Inheriting passes no credential and never a backend's key: they
        # belong to the operator, and the guest is untrusted (secret_env).
        env = guest_env(os.environ, self.options.env, inherit=self.options.inherit_env,
                        extra_deny=self.services.key_envs())
        if env:
            wasi.env = list(env.items())
        if self.options.stdin is not None:
            path = scratch / "stdin"
            path.write_bytes(self.options.stdin)
            wasi.stdin_file = str(path)
        if self.stdout is not None:
            # Paths, not stdout_custom: wasmtime-py's custom-output callbacks
            # can abort the process at interpreter exit (a tokio worker
            # starting during shutdown panics across the FFI boundary).
            self._output = OutputCapture(scratch)
            paths = self._output.paths()
            wasi.stdout_file = str(paths["stdout"])
            wasi.stderr_file = str(paths["stderr"])
        else:
            wasi.inherit_stdout()
            wasi.inherit_stderr()
        for host_path, guest_path in self.options.dirs:
            wasi.preopen_dir(host_path, guest_path)
        return wasi

    def _bind_exports(self, instance: wasmtime.Instance) -> None:
        exports = instance.exports(self.store)
        memory = exports.get("memory")
        if isinstance(memory, wasmtime.Memory):
            self.memory = GuestMemory(self.store, memory)
        for name in ("__indirect_function_table", "table"):
            table = exports.get(name)
            if isinstance(table, wasmtime.Table):
                self._table = table
                break
        else:
            self._table = next((e for e in exports if isinstance(e, wasmtime.Table)), None)
        alloc, free = exports.get("spear_alloc"), exports.get("spear_free")
        if isinstance(alloc, wasmtime.Func) and isinstance(free, wasmtime.Func):
            self.allocator = (_native.RawFunc(self.store, alloc, 1, 1),
                              _native.RawFunc(self.store, free, 2, 0))

    def instantiate(self, scratch: Path) -> wasmtime.Instance:
        config = self.config
        self.store.set_limits(
            memory_size=config.max_memory if config.max_memory is not None else -1,
            table_elements=MAX_TABLE_ELEMENTS, tables=MAX_TABLES, memories=MAX_MEMORIES)
        self.store.set_fuel(config.fuel if config.fuel is not None else _UNLIMITED_FUEL)
        _native.watch_epochs(self.store)
        self.store.set_wasi(self._wasi(scratch))
        instance = self.module.pre.instantiate(self.store)
        self._bind_exports(instance)
        return instance

    def execute(self) -> RunResult:
        """Instantiate, call the entry export, and report how the run ended."""
        with scratch_dir(self.run_id) as scratch:
            try:
                outcome, message, exit_code = self._enter(scratch)
            finally:
                self._collect_output()
        return self._finish(outcome, message, exit_code)

    def _enter(self, scratch: Path) -> tuple[Outcome, str, int]:
        self.events.emit(RUN_START, module=self.module.name, sha256=self.module.sha256)
        previous = _native.enter_run(self)
        try:
            instance = self.instantiate(scratch)
            entry_name = self.options.invoke or "_start"
            entry = instance.exports(self.store).get(entry_name)
            if not isinstance(entry, wasmtime.Func):
                return (Outcome.LOAD_ERROR,
                        f"the module exports no function named {entry_name!r}", 0)
            returned = entry(self.store)
            if self.options.invoke and isinstance(returned, int):
                return Outcome.EXITED, "", returned & 0xFF
            return Outcome.EXITED, "", 0
        except wasmtime.ExitTrap as exc:
            return Outcome.EXITED, "", exc.code
        except wasmtime.Trap as exc:
            return (*classify_trap(exc.trap_code, exc.message, self.interrupts.noted,
                                   self.config, self.memory), 0)
        except wasmtime.WasmtimeError as exc:
            return (*classify_error(str(exc), self.interrupts.noted, self.config), 0)
        finally:
            _native.enter_run(previous)

    def _collect_output(self) -> None:
        streams, self._output = self._output, None
        if streams is None:
            return
        guest = streams.finish()
        for capture, name in ((self.stdout, "stdout"), (self.stderr, "stderr")):
            if capture is not None:
                # Host log lines were captured as they came; the guest's own
                # stream goes first.
                capture.data[:0] = guest[name].data
                capture.truncated = capture.truncated or guest[name].truncated

    def _finish(self, outcome: Outcome, message: str, exit_code: int) -> RunResult:
        code = exit_code if outcome is Outcome.EXITED else exit_code_for(outcome)
        try:
            self.close_all_sessions()
            run_ended(self)
            # Fds fed from other threads (mic sources, rtasr connections) stop their
            # workers when closed: none may outlive the run.
            for fd, _entry in self.fds.entries():
                self.close_fd(fd, "run_end")
        finally:
            # Whatever the closing raised, the journal's buffered records are
            # written and its file, lock and sync thread let go.
            if self.journal is not None:
                self.journal.end(outcome, code)
        elapsed = (time.monotonic() - self.started) * 1000.0
        self.events.emit(RUN_END, outcome=outcome, exit_code=code, elapsed_ms=round(elapsed, 3))
        return RunResult(
            run_id=self.run_id, exit_code=code, outcome=outcome, message=message,
            stdout=bytes(self.stdout.data) if self.stdout is not None else None,
            stderr=bytes(self.stderr.data) if self.stderr is not None else None,
            usage=dict(self.usage), transcripts=list(self.transcripts), elapsed_ms=elapsed,
            logs=self.logs.lines(), logs_dropped=self.logs.dropped,
        )
