"""One P4 measurement in a fresh process: N guests (or N bare httpx clients)
on N threads, each making SENDS requests; prints a JSON line with the wall
time, its start and end (perf_counter: CLOCK_MONOTONIC, the same clock in
every process), the process CPU time over it (all threads: cpu_s / (N x
SENDS) is the noise-robust cost of a send) and the peak RSS the run added.
`python -m bench.p4_worker N SENDS URL [--bare] [--wait]`: with --wait it
prints "ready" once warmed up and starts when a line arrives on stdin, so
several workers start together."""

from __future__ import annotations

import json
import sys
import threading
import time
from pathlib import Path


def _status_kb(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


def _reset_peak() -> bool:
    try:
        Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM to the current RSS
        return True
    except OSError:
        return False


def main(argv: list[str]) -> int:
    n, sends, url = int(argv[0]), int(argv[1]), argv[2]
    bare = "--bare" in argv
    if bare:
        from bench.upstream import BareClient

        client = BareClient(url)
        body = json.dumps({"model": "bench", "messages": [
            {"role": "user", "content": "hello"}]}, separators=(",", ":")).encode()

        def work() -> None:
            for _ in range(sends):
                client.post(body)

        client.post(body)
    else:
        from bench.wat_agent import agent_wasm
        from spearpy.host import Host

        host = Host(cache_dir=None, model="bench", base_url=url, max_retries=0,
                    request_timeout=60.0)
        module = host.load(agent_wasm(sends))
        warm = host.run(host.load(agent_wasm(1)))
        if warm.exit_code != 0:
            print(json.dumps({"error": f"warm-up run failed: {warm.message}"}))
            return 1
        failures: list[str] = []

        def work() -> None:
            result = host.run(module)
            if result.exit_code != 0:
                failures.append(result.message)

    threads = [threading.Thread(target=work) for _ in range(n)]
    rss_before = _status_kb("VmRSS")
    peak_reset = _reset_peak()
    if "--wait" in argv:
        print("ready", flush=True)
        sys.stdin.readline()
    cpu_start = time.process_time()
    start = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    end = time.perf_counter()
    cpu = time.process_time() - cpu_start
    wall = end - start
    peak = _status_kb("VmHWM")
    out = {"n": n, "sends": sends, "wall_s": wall, "start": start, "end": end, "cpu_s": cpu,
           "rss_before_kb": rss_before,
           "peak_kb": peak, "peak_reset": peak_reset,
           "added_kb_per_guest": max(0, peak - rss_before) / n}
    if not bare and failures:
        out["error"] = f"{len(failures)} runs failed: {failures[0]}"
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
