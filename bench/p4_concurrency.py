"""P4: N guests at once against a model with a fixed 20 ms latency, vs the
latency-bound ideal (every guest's sends back to back at exactly 20 ms).

In one process (threads, one Host), and split over worker processes (what
`batch` does by default): 2 processes x 16 guests, started together. Bare
httpx threads making the same requests show, for information, what one
process of plain client code reaches. The latency server is an asyncio
Protocol in a process of its own. Each measurement is a fresh process, which
also gives a clean peak RSS per concurrent guest."""

from __future__ import annotations

import json
import subprocess
import sys

from bench.stats import Row, Series, Target
from bench.upstream import ServerProcess

LATENCY_MS = 20
COUNTS = (1, 8, 32)
PROCESSES = 2  # the split of the largest count over worker processes


def _argv(n: int, sends: int, url: str, *flags: str) -> list[str]:
    return [sys.executable, "-m", "bench.p4_worker", str(n), str(sends), url, *flags]


def _result(stdout: str, stderr: str, returncode: int | None) -> dict[str, float]:
    lines = [line for line in stdout.splitlines() if line.startswith("{")]
    if returncode != 0 or not lines:
        raise RuntimeError(f"p4 worker failed ({returncode}): {stderr[-600:]}")
    result: dict[str, float] = json.loads(lines[-1])
    if "error" in result:
        raise RuntimeError(f"p4 worker: {result['error']}")
    return result


def _worker(n: int, sends: int, url: str, bare: bool) -> dict[str, float]:
    argv = _argv(n, sends, url, *(["--bare"] if bare else []))
    done = subprocess.run(argv, capture_output=True, text=True, timeout=600, check=False)
    return _result(done.stdout, done.stderr, done.returncode)


def _workers(n: int, processes: int, sends: int, url: str) -> tuple[float, float]:
    """(wall from the first start to the last end, peak RSS per guest of all
    the workers together: what a guest costs when each process holds n/processes)."""
    procs = [subprocess.Popen(_argv(n // processes, sends, url, "--wait"), text=True,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE) for _ in range(processes)]
    try:
        for proc in procs:  # every worker warmed up before any starts
            assert proc.stdout is not None
            line = proc.stdout.readline().strip()
            if line != "ready":
                raise RuntimeError(f"p4 worker did not get ready: {line!r}")
        for proc in procs:
            assert proc.stdin is not None
            proc.stdin.write("go\n")
            proc.stdin.flush()
        results = []
        for proc in procs:
            out, err = proc.communicate(timeout=600)
            results.append(_result(out, err, proc.returncode))
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    wall = max(r["end"] for r in results) - min(r["start"] for r in results)
    return wall, sum(r["peak_kb"] for r in results) / n


def run(quick: bool) -> list[Row]:
    repeats, sends = (1, 5) if quick else (3, 10)
    ideal = sends * LATENCY_MS / 1000.0
    rows = []
    server_argv = [sys.executable, "-m", "bench.latency_server", str(LATENCY_MS)]
    with ServerProcess(None, server_argv) as server:
        for n in COUNTS:
            ours, bare, kb = Series(), Series(), []
            split, split_kb = Series(), []
            for _ in range(repeats):
                result = _worker(n, sends, server.base_url, bare=False)
                ours.add(result["wall_s"])
                kb.append(result["added_kb_per_guest"])
                bare.add(_worker(n, sends, server.base_url, bare=True)["wall_s"])
                if n == COUNTS[-1]:
                    wall, per_guest = _workers(n, PROCESSES, sends, server.base_url)
                    split.add(wall)
                    split_kb.append(per_guest)
            kb.sort()
            per_guest_kb = kb[len(kb) // 2]
            last = n == COUNTS[-1]
            rows.append(Row(
                f"P4.concurrency.n{n}.vs_ideal", "P4",
                f"{n} concurrent guests x {sends} sends (20 ms model), one process",
                f"latency-bound ideal ({ideal * 1000:.0f} ms)", "ms", ours, Series([ideal]),
                Target("<=", 1 / 0.7, "<= 1.43 (>= 70% of ideal)") if last else None,
                extra={"efficiency": round(ideal / ours.p50, 3),
                       "peak_rss_kb_per_guest": round(per_guest_kb, 1)},
                peak_kb=per_guest_kb))
            rows.append(Row(
                f"P4.concurrency.n{n}.vs_bare_httpx", "P4",
                f"{n} concurrent guests x {sends} sends (20 ms model), one process",
                f"{n} bare httpx threads, same requests", "ms", ours, bare,
                note="information: what one process of plain client code reaches"))
            if last:
                split_kb.sort()
                rows.append(Row(
                    f"P4.concurrency.n{n}.processes{PROCESSES}.vs_ideal", "P4",
                    f"{n} concurrent guests x {sends} sends (20 ms model), {PROCESSES} worker "
                    f"processes x {n // PROCESSES}",
                    f"latency-bound ideal ({ideal * 1000:.0f} ms)", "ms", split, Series([ideal]),
                    Target("<=", 1 / 0.85, "<= 1.18 (>= 85% of ideal)"),
                    extra={"efficiency": round(ideal / split.p50, 3),
                           "peak_rss_kb_per_guest_total": round(split_kb[len(split_kb) // 2],
                                                                1)},
                    note="peak_rss_kb_per_guest_total: the workers' whole peak RSS "
                         "(interpreter and all) over the guests"))
    return rows
