"""wasmtime's WASI I/O runtime, made before a long-lived process needs it.

wasmtime-wasi keeps one process-wide tokio runtime, created at the first
guest write to stdout or stderr. Creating it takes file descriptors (an
epoll and an eventfd); without them wasmtime panics, and a panic inside the
C API aborts the whole process. A service whose first run comes while its
descriptors are exhausted (a client holding hundreds of connections) would
go down with it: measured, a Host run with 6-8 free descriptors and a cold
runtime exits 134. Once the runtime exists, the same run fails cleanly
(-EMFILE, "cannot create a memfd": the run's error, not the process's).
`spearpy serve` and the batch and serve workers call `prime()` at start.
"""

from __future__ import annotations

import threading

import wasmtime

# One fd_write of nothing to stdout: the first call that goes through the
# runtime (clock_time_get, for one, does not).
_WAT = """(module
  (import "wasi_snapshot_preview1" "fd_write"
    (func $fd_write (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  (func (export "prime")
    (drop (call $fd_write (i32.const 1) (i32.const 0) (i32.const 0) (i32.const 0)))))"""

_lock = threading.Lock()
_primed = False


def prime() -> None:
    """Create the runtime now, once per process (~7 ms: a tiny module's compile)."""
    global _primed
    with _lock:
        if _primed:
            return
        engine = wasmtime.Engine()
        store = wasmtime.Store(engine)
        store.set_wasi(wasmtime.WasiConfig())  # no stdio inherited: the write goes nowhere
        linker = wasmtime.Linker(engine)
        linker.define_wasi()
        instance = linker.instantiate(store, wasmtime.Module(engine, _WAT))
        export = instance.exports(store)["prime"]
        assert isinstance(export, wasmtime.Func)
        export(store)
        _primed = True
