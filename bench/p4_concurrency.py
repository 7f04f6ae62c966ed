"""P4: N guests at once (threads of one process, one Host) against a model
with a fixed 20 ms latency, vs the latency-bound ideal (every guest's sends
back to back at exactly 20 ms); bare httpx threads doing the same requests
show what the loopback server itself allows. Each measurement runs in a fresh
process, which also gives a clean peak RSS per concurrent guest."""

from __future__ import annotations

import json
import subprocess
import sys

from bench.stats import Row, Series, Target
from bench.upstream import ServerProcess

LATENCY_MS = 20
COUNTS = (1, 8, 32)


def _worker(n: int, sends: int, url: str, bare: bool) -> dict[str, float]:
    argv = [sys.executable, "-m", "bench.p4_worker", str(n), str(sends), url]
    if bare:
        argv.append("--bare")
    done = subprocess.run(argv, capture_output=True, text=True, timeout=600, check=False)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"p4 worker failed ({done.returncode}): {done.stderr[-600:]}")
    result: dict[str, float] = json.loads(lines[-1])
    if "error" in result:
        raise RuntimeError(f"p4 worker: {result['error']}")
    return result


def run(quick: bool) -> list[Row]:
    repeats, sends = (1, 5) if quick else (3, 10)
    ideal = sends * LATENCY_MS / 1000.0
    rows = []
    server_argv = [sys.executable, "-m", "bench.latency_server", str(LATENCY_MS)]
    with ServerProcess(None, server_argv) as server:
        for n in COUNTS:
            ours, bare, kb = Series(), Series(), []
            for _ in range(repeats):
                result = _worker(n, sends, server.base_url, bare=False)
                ours.add(result["wall_s"])
                kb.append(result["added_kb_per_guest"])
                bare.add(_worker(n, sends, server.base_url, bare=True)["wall_s"])
            kb.sort()
            per_guest_kb = kb[len(kb) // 2]
            rows.append(Row(
                f"P4.concurrency.n{n}.vs_ideal", "P4",
                f"{n} concurrent guests x {sends} sends (20 ms model)",
                f"latency-bound ideal ({ideal * 1000:.0f} ms)", "ms", ours, Series([ideal]),
                Target("<=", 1.25, "<= 1.25 (>= 80% of ideal)") if n == COUNTS[-1] else None,
                extra={"efficiency": round(ideal / ours.p50, 3),
                       "peak_rss_kb_per_guest": round(per_guest_kb, 1)},
                peak_kb=per_guest_kb))
            rows.append(Row(
                f"P4.concurrency.n{n}.vs_bare_httpx", "P4",
                f"{n} concurrent guests x {sends} sends (20 ms model)",
                f"{n} bare httpx threads, same requests", "ms", ours, bare,
                note="information: what the loopback server itself allows"))
    return rows
