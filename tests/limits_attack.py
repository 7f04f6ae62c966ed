"""One hostile hostcall in a process of its own, under a memory rlimit.

`python -m tests.limits_attack NAME` builds attack NAME's payload inside the
guest's memory (tests/wat/hostile_limits.wat), makes the one hostcall, and
prints a JSON line: the hostcall's result or the trap that ended the run, the
run's interrupt, how long the call took, and the process's peak RSS. Run by
tests/test_hostile_limits.py, which judges the line: a process of its own so
the peak RSS is this attack's alone, and so an attack that makes the host
allocate without bound hits the rlimit instead of the machine.

RLIMIT_DATA, not RLIMIT_AS: wasmtime reserves 4 GiB of address space for a
wasm32 memory up front (PROT_NONE, never touched), so an address-space limit
below that refuses to instantiate any guest. RLIMIT_DATA counts what is
actually writable: Python's heap and the guest's grown pages.
"""

from __future__ import annotations

import json
import resource
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

RLIMIT_BYTES = 1 << 30
TIMEOUT_S = 3.0
MAX_HOST_BYTES = 16 << 20
BIG = 150 << 20  # the 150 MB payload of the report
PAGE = 65536
BASE = 65536  # payloads start past the guest's first page (scratch for small values)


def _peak_rss_kib() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return 0


def draft4_enum_schema(items: int) -> bytes:
    """A small schema whose check is quadratic: jsonschema's uniqueItems on a
    draft-04 enum of dicts (unsortable) compares every pair in Python."""
    enum = [{"k": i} for i in range(items)]
    return json.dumps({"name": "slow", "parameters": {
        "$schema": "http://json-schema.org/draft-04/schema#", "enum": enum}}).encode()


def amplified_schema(size: int) -> bytes:
    """A tool schema of `size` bytes that parses into ~24x its size of Python
    objects: one empty dict per 3 bytes."""
    head, tail = b'{"name":"amp","parameters":{"type":"object","default":[', b"{}]}}"
    count = (size - len(head) - len(tail)) // 3
    return head + b"{}," * count + tail


def main(name: str) -> None:
    resource.setrlimit(resource.RLIMIT_DATA, (RLIMIT_BYTES, RLIMIT_BYTES))
    import wasmtime

    from spearpy import abi
    from spearpy.host import Host
    from tests.probe import Probe, wat_module

    host = Host(cache_dir=None, model="m", base_url="http://127.0.0.1:9/v1", max_retries=0,
                timeout=TIMEOUT_S, max_host_bytes=MAX_HOST_BYTES)
    p = Probe(host, wat_module("hostile_limits.wat"))
    bugs: list[str] = []
    p.run.note_host_bug = lambda where, exc: bugs.append(f"{where}: {exc!r}")  # type: ignore[method-assign]

    def big(prefix: bytes, fill: int, suffix: bytes = b"") -> tuple[int, int]:
        """prefix + BIG bytes of `fill` + suffix at BASE, built by the guest."""
        total = len(prefix) + BIG + len(suffix)
        pages = (BASE + total) // PAGE + 1 - p.run.memory.size() // PAGE
        assert p.call("grow", pages) >= 0
        p.put(BASE, prefix)
        p.call("fill", BASE + len(prefix), fill, BIG)
        p.put(BASE + len(prefix) + BIG, suffix)
        return BASE, total

    fd = int(p.hc("cchat_create"))
    attacks: dict[str, Callable[[], Any]] = {}

    def attack(fn: Callable[[], Any]) -> Callable[[], Any]:
        attacks[fn.__name__] = fn
        return fn

    @attack
    def schema() -> Any:
        ptr, n = big(b'{"name":"big","description":"', ord("a"), b'"}')
        return p.hc("cchat_write_fn", fd, 0, ptr, n)

    @attack
    def message() -> Any:
        ptr, n = big(b"", ord("a"))
        role, role_len = p.put(256, "user")
        return p.hc("cchat_write_msg", fd, role, role_len, ptr, n)

    @attack
    def tool_answer() -> Any:
        ptr, n = big(b'{"tool_call_id":"x","content":"', ord("a"), b'"}')
        role, role_len = p.put(256, "tool")
        return p.hc("cchat_write_msg", fd, role, role_len, ptr, n)

    @attack
    def param() -> Any:
        ptr, n = big(b'{"key":"stop","value":"', ord("a"), b'"}')
        p.u32(128, n)
        return p.hc("cchat_ctl", fd, abi.CTL_SET_PARAM, ptr, 128)

    @attack
    def flags() -> Any:
        ptr, n = big(b'{"set":["O_NONBLOCK"],"clear":[', ord(" "), b"]}")
        p.u32(128, n)
        return p.hc("spear_fd_ctl", fd, abi.FD_CTL_SET_FLAGS, ptr, 128)

    @attack
    def log() -> Any:
        ptr, n = big(b"", ord("a"))
        return p.hc("log", 2, ptr, n)

    @attack
    def slow_schema() -> Any:
        raw = draft4_enum_schema(4000)
        assert len(raw) <= abi.MAX_TOOL_SCHEMA_BYTES
        assert p.call("grow", len(raw) // PAGE + 2) >= 0
        ptr, n = p.put(BASE, raw)
        return p.hc("cchat_write_fn", fd, 0, ptr, n)

    @attack
    def cancelled_schema() -> Any:
        raw = draft4_enum_schema(4000)
        assert p.call("grow", len(raw) // PAGE + 2) >= 0
        ptr, n = p.put(BASE, raw)
        p.run.interrupts.deadline = None  # only the cancel can stop it
        threading.Timer(0.5, p.run.interrupts.cancel_event.set).start()
        return p.hc("cchat_write_fn", fd, 0, ptr, n)

    @attack
    def amplified_schemas() -> Any:
        # Each schema is within the size cap; 15 of them at 1 MiB each fit a
        # 16 MiB budget counted by size, while keeping ~24x that in objects.
        raw = amplified_schema(abi.MAX_TOOL_SCHEMA_BYTES)
        assert p.call("grow", len(raw) // PAGE + 2) >= 0
        results = []
        for i in range(15):
            ptr, n = p.put(BASE, raw.replace(b'"amp"', f'"a{i:02d}"'.encode(), 1))
            results.append(p.hc("cchat_write_fn", fd, 0, ptr, n))
        return results

    started = time.monotonic()
    result: Any = None
    trap = None
    try:
        result = attacks[name]()
    except (wasmtime.Trap, wasmtime.WasmtimeError) as exc:
        trap = str(exc).splitlines()[0]
    elapsed = time.monotonic() - started
    print(json.dumps({"result": result, "trap": trap, "interrupt": p.run.interrupts.noted,
                      "elapsed": elapsed, "peak_rss": _peak_rss_kib() << 10,
                      "guest_memory": p.run.memory.size(), "host_bytes": p.run.host_bytes,
                      "host_bugs": bugs}))
    sys.stdout.flush()


if __name__ == "__main__":
    main(sys.argv[1])
