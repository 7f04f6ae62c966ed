"""The Host's in-memory module cache: bounded by bytes of compiled code, least
recently used out first, counted for Prometheus, safe for runs in progress and
for loads from many threads."""

from __future__ import annotations

import gc
import threading
from pathlib import Path
from typing import Any

import wasmtime
from prometheus_client import CollectorRegistry, generate_latest

from spearpy.observe.metrics import Metrics

SAMPLES = Path(__file__).resolve().parents[1] / "wasm-samples"

# Sleeps inside a hostcall (the guest is mid-run, its code on the stack), then
# writes "done\n" to stdout: proof that the module still works after eviction.
SLEEPER = """
(module
  (import "spear" "sleep_ms" (func $sleep (param i32)))
  (import "wasi_snapshot_preview1" "fd_write"
    (func $fd_write (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 16) "done\\n")
  (func (export "_start")
    (call $sleep (i32.const {ms}))
    (i32.store (i32.const 0) (i32.const 16))
    (i32.store (i32.const 4) (i32.const 5))
    (drop (call $fd_write (i32.const 1) (i32.const 0) (i32.const 1) (i32.const 8)))))
"""


def _wat(text: str) -> bytes:
    return bytes(wasmtime.wat2wasm(text))


def _distinct_modules(n: int) -> list[bytes]:
    """n small modules with different digests (a constant differs)."""
    return [_wat(f'(module (func (export "_start")) (func (export "k") (result i32) '
                 f'(i32.const {i})))') for i in range(n)]


def _weight(make_host: Any, wasm: bytes) -> int:
    probe = make_host()
    probe.load(wasm)
    weight: int = probe.modules.stats().bytes
    assert weight > 0
    return weight


def test_lru_evicts_by_bytes_and_reloads(make_host: Any) -> None:
    first, second, third = _distinct_modules(3)
    weight = max(_weight(make_host, m) for m in (first, second, third))
    host = make_host(module_cache_bytes=2 * weight + weight // 2)  # room for two
    a = host.load(first)
    assert host.load(first) is a  # a hit returns the cached handle
    b = host.load(second)
    host.load(first)  # first is now the most recently used
    host.load(third)  # past the bound: second, the least recently used, goes
    assert a.sha256 in host.modules and b.sha256 not in host.modules
    stats = host.modules.stats()
    assert (stats.hits, stats.misses, stats.evictions, stats.entries) == (2, 3, 1, 2)
    assert stats.bytes <= stats.max_bytes
    again = host.load(second)  # a miss: compiled afresh, and it runs
    assert again is not b and again.sha256 == b.sha256
    assert host.run(again, invoke="k").exit_code == 1  # second returns its constant
    assert host.modules.stats().misses == 4


def test_a_module_larger_than_the_bound_is_used_not_kept(make_host: Any) -> None:
    host = make_host(module_cache_bytes=0)
    wasm = _distinct_modules(1)[0]
    loaded = host.load(wasm)
    assert loaded.sha256 not in host.modules
    assert host.run(loaded).ok
    stats = host.modules.stats()
    assert (stats.entries, stats.bytes, stats.evictions) == (0, 0, 1)


def test_eviction_does_not_break_a_run_in_progress(make_host: Any) -> None:
    sleeper = _wat(SLEEPER.format(ms=300))
    others = _distinct_modules(3)
    weight = max(_weight(make_host, m) for m in [sleeper, *others])
    host = make_host(module_cache_bytes=weight + weight // 2)  # room for one
    started = threading.Event()
    handle = host.start(sleeper, capture_output=True,
                        on_event=lambda e: started.set() if e.kind == "run_start" else None)
    assert started.wait(10)
    for wasm in others:  # each load evicts the one before, the sleeper first
        host.load(wasm)
    gc.collect()  # nothing but the run keeps the sleeper's code alive now
    assert host.modules.stats().evictions >= 3
    assert host.run(host.load(sleeper)).ok  # reloaded and run beside the first run
    result = handle.result(timeout=30)
    assert result.ok, result.message
    assert result.stdout == b"done\n"


def test_concurrent_loads_stay_consistent(make_host: Any) -> None:
    modules = _distinct_modules(6)
    weight = max(_weight(make_host, m) for m in modules)
    host = make_host(module_cache_bytes=3 * weight)
    errors: list[BaseException] = []

    def worker(offset: int) -> None:
        try:
            for i in range(30):
                loaded = host.load(modules[(i + offset) % len(modules)])
                assert loaded.engine is host.engine
        except BaseException as exc:  # reported below, on the test's thread
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not errors
    stats = host.modules.stats()
    assert stats.hits + stats.misses == 4 * 30
    assert stats.bytes <= stats.max_bytes and stats.entries <= 3
    assert all(host.run(m).ok for m in modules)


def test_metrics_export_the_cache_counts(make_host: Any) -> None:
    host = make_host()
    wasm = _distinct_modules(1)[0]
    host.load(wasm)
    host.load(wasm)
    registry = CollectorRegistry()
    Metrics(registry).watch_module_cache(host.modules)
    text = generate_latest(registry).decode()
    assert "spearpy_module_cache_hits_total 1.0" in text
    assert "spearpy_module_cache_misses_total 1.0" in text
    assert "spearpy_module_cache_evictions_total 0.0" in text
    assert "spearpy_module_cache_entries 1.0" in text
    assert f"spearpy_module_cache_bytes {float(host.modules.stats().bytes)}" in text
    assert "module_cache_hits_created" not in text
