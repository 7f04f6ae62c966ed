"""SV: `spearpy serve` against the same runs through `Host` directly.

(a) 64 concurrent short runs (wasm-samples/c_chat.wasm on the scripted model:
    one completion over loopback HTTP) through the service (`POST /v1/runs`
    with `wait`, a real uvicorn on 127.0.0.1) vs the same 64 runs on threads
    of one Host: per-run latency p50 and p99, and runs per second. The load
    comes from a client process of its own (one asyncio loop): on threads of the
    service's process, the client's own HTTP work (about as much CPU per
    request as the service's) took the service's GIL and was billed to it.
    Host and service batches alternate, so both see the same machine; both
    capture the guest's output (the service answers with it). A row for
    each executor: auto (the CLI's default, which the target is on),
    threads and processes; and, for information, auto with the runs'
    completion coming from a model that takes 20 ms (bench.latency_server
    in a process of its own, both sides).
(b) event delivery lag through `spearpy serve` in a process of its own, as
    an operator starts it (the auto executor: events cross from a worker
    process): for a run whose completion arrives after 100 ms, the time from
    an event's own timestamp to its arrival at a live SSE subscriber.

`python -m bench.s_serve client URL COUNT` is the load process: one batch of
COUNT concurrent runs per line read from stdin, one JSON line of latencies out.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
from pathlib import Path
from typing import Any

import httpx

from bench.stats import Row, Series, Target, percentile
from bench.upstream import ServerProcess
from spearpy.config import HostConfig
from spearpy.host import Host
from spearpy.serve.app import create_app
from spearpy.serve.auto import AutoRuns
from spearpy.serve.config import ServeConfig
from spearpy.serve.server import BackgroundServer

ROOT = Path(__file__).resolve().parent.parent
CHAT = ROOT / "wasm-samples" / "c_chat.wasm"
SCRIPT = ROOT / "wasm-samples" / "scripts" / "chat.json"
N = 64


def _host_batch(host: Host, count: int) -> tuple[list[float], float]:
    def one(_: int) -> float:
        t0 = time.perf_counter()
        # Output captured, as the service does to answer with stdout/stderr.
        host.run(CHAT, capture_output=True)
        return time.perf_counter() - t0

    started = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(max_workers=count) as pool:
        times = list(pool.map(one, range(count)))
    return times, time.perf_counter() - started


class _LoadProcess:
    """The client process of (a), driven one batch at a time."""

    def __init__(self, url: str, count: int) -> None:
        self._process = subprocess.Popen(
            [sys.executable, "-m", "bench.s_serve", "client", url, str(count)], cwd=ROOT,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def batch(self) -> tuple[list[float], float]:
        assert self._process.stdin is not None and self._process.stdout is not None
        self._process.stdin.write("go\n")
        self._process.stdin.flush()
        line = self._process.stdout.readline()
        if not line:
            raise RuntimeError("the load process died (see its traceback above)")
        answer = json.loads(line)
        return answer["times"], answer["wall"]

    def close(self) -> None:
        if self._process.stdin is not None:
            self._process.stdin.close()
        self._process.wait(30)


async def _post(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                request: bytes) -> float:
    """One POST on a keep-alive connection: seconds from sending it to the
    last byte of the answer."""
    t0 = time.perf_counter()
    writer.write(request)
    head = await reader.readuntil(b"\r\n\r\n")
    status = head.split(b" ", 2)[1]
    length = 0
    for line in head.split(b"\r\n"):
        if line[:15].lower() == b"content-length:":
            length = int(line[15:])
    body = await reader.readexactly(length)
    if status != b"201":
        raise RuntimeError(f"{status!r}: {body[:300]!r}")
    return time.perf_counter() - t0


async def _client_batches(url: str, count: int) -> None:
    """One keep-alive connection per concurrent run, all on one asyncio loop
    in one thread. Client threads would fight over this process's GIL and
    read answers late (with 64 http.client threads the client's own convoy
    added tens of ms to every latency it measured, billed to the service)."""
    address = urllib.parse.urlsplit(url)
    body = json.dumps({"module": "c_chat", "wait": True}).encode()
    request = (f"POST /v1/runs HTTP/1.1\r\nHost: {address.hostname}:{address.port}\r\n"
               f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
               ).encode() + body
    connections = [await asyncio.open_connection(address.hostname, address.port)
                   for _ in range(count)]
    await asyncio.gather(*(_post(r, w, request) for r, w in connections))  # warm
    loop = asyncio.get_running_loop()
    while await loop.run_in_executor(None, sys.stdin.readline):
        started = time.perf_counter()
        times = await asyncio.gather(*(_post(r, w, request) for r, w in connections))
        print(json.dumps({"times": times, "wall": time.perf_counter() - started}),
              flush=True)


def _lag(base_url: str) -> list[float]:
    """Seconds from each event's timestamp to its arrival over SSE, for the
    events that happen once the stream is open. Those from before (the run's
    first three, emitted while the GET was on its way) come as its replay:
    counting them timed the subscription's set-up, 5-12 ms of the p99."""
    lags: list[float] = []
    with httpx.Client(base_url=base_url, timeout=60) as client:
        run = client.post("/v1/runs", json={"module": "c_chat_paced"}).json()
        with client.stream("GET", f"/v1/runs/{run['id']}/events") as events:
            subscribed = time.time()  # the answer's head is in: the stream is live
            for line in events.iter_lines():
                if not line.startswith("data:"):
                    continue
                record = json.loads(line[5:])
                if record.get("ts", 0) > subscribed:
                    lags.append(time.time() - record["ts"])
                if record.get("kind") == "run_end":
                    break
    return lags


class ServeProcess:
    """`spearpy serve` as an operator starts it, in a process of its own (the
    bench process's heap and threads are not a service's), on the CLI's
    default executor, whose events cross from a worker process. Yields its
    URL once a run has gone to a worker."""

    def __init__(self, modules: Path, state: Path, script: Path) -> None:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        self._argv = [sys.executable, "-m", "spearpy", "serve", "--modules", str(modules),
                      "--state-dir", str(state), "--port", str(self.port),
                      "--no-access-log", "--backend", f"scripted:{script}", "--max-retries", "0"]
        self._process: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> str:
        self._process = subprocess.Popen(self._argv, stdout=subprocess.DEVNULL,
                                         stderr=subprocess.DEVNULL)
        url = f"http://127.0.0.1:{self.port}"
        deadline = time.monotonic() + 120
        with httpx.Client(base_url=url, timeout=30) as client:
            while True:  # the workers start in the background: until then, threads
                if time.monotonic() > deadline or self._process.poll() is not None:
                    self.__exit__()
                    raise RuntimeError("spearpy serve did not start with its workers")
                try:
                    run = client.post("/v1/runs", json={"module": "c_chat", "wait": True})
                    if run.json().get("executor") == "processes":
                        return url
                except httpx.TransportError:
                    pass
                time.sleep(0.2)

    def __exit__(self, *_: object) -> None:
        if self._process is not None:
            self._process.terminate()
            self._process.wait(30)


def _served_vs_host(tmp: Path, modules: Path, host_config: HostConfig, count: int,
                    repeats: int, executor: str) -> dict[str, Any]:
    served: list[float] = []
    direct: list[float] = []
    walls: dict[str, float] = {"serve": 0.0, "host": 0.0}
    config = ServeConfig(modules_dir=modules, state_dir=Path(tempfile.mkdtemp(dir=tmp)),
                         host=host_config, max_concurrent=count, executor=executor)
    with Host(host_config) as host, \
            BackgroundServer(create_app(config), grace=1.0) as server:
        host.run(CHAT)  # compile once, as the service's first run does
        _workers_ready(server)
        load = _LoadProcess(server.url, count)
        try:
            for _ in range(repeats):
                times, wall = _host_batch(host, count)
                direct += times
                walls["host"] += wall
                times, wall = load.batch()
                served += times
                walls["serve"] += wall
        finally:
            load.close()
    ratios = [percentile(served[i * count:(i + 1) * count], 50)
              / percentile(direct[i * count:(i + 1) * count], 50) for i in range(repeats)]
    return {"served": served, "direct": direct, "ratios": ratios,
            "rate": {name: round(count * repeats / wall, 1) for name, wall in walls.items()}}


def _workers_ready(server: BackgroundServer) -> None:
    """auto starts its workers in the background (runs go to threads until
    then): measure once they are up, as a service that has been running is."""
    executor = server.app.state.service.runs.executor
    if isinstance(executor, AutoRuns):
        deadline = time.monotonic() + 120
        while not executor.processes.ready():
            if time.monotonic() > deadline:
                raise RuntimeError("the auto executor's workers did not start")
            time.sleep(0.05)


def _row(executor: str, count: int, result: dict[str, Any], model_ms: int = 0) -> Row:
    served, direct, ratios = result["served"], result["direct"], result["ratios"]
    p99 = round(percentile(served, 99) * 1e3, 1), round(percentile(direct, 99) * 1e3, 1)
    rate = result["rate"]
    default = executor == "auto"
    model = (f"a {model_ms} ms model in its own process" if model_ms
             else "the scripted model answering at once")
    suffix = ("" if default else f"_{executor}") + (f"_model{model_ms}ms" if model_ms else "")
    return Row("SV.runs_p50" + suffix, "SV",
               f"{count} concurrent short runs ({model}) through spearpy serve --executor "
               f"{executor}{' (the default)' if default else ''} (POST /v1/runs wait=true, "
               "real uvicorn, client in its own process)",
               f"the same {count} runs on threads of one Host", "ms", Series(served),
               Series(direct), Target("<=", 1.3) if default and not model_ms else None,
               note=f"p99 {p99[0]} ms vs {p99[1]} ms; {rate['serve']:.0f} vs "
                    f"{rate['host']:.0f} runs/s; p50 ratio per interleaved repeat "
                    f"{min(ratios):.2f}..{max(ratios):.2f}",
               extra={"runs_per_s": rate, "ratio_per_repeat": [round(r, 3) for r in ratios]})


def run(quick: bool) -> list[Row]:
    count = 16 if quick else N
    # One batch's p50 ratio ranges 0.9x-3.4x on the shared 2-core machine;
    # with 5 batches two executors that place runs identically differed by
    # 0.3x in one run. 20 cost ~30 s more.
    repeats = 2 if quick else 20
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="bench-sv-") as tmp_name:
        tmp = Path(tmp_name)
        modules = tmp / "modules"
        modules.mkdir()
        shutil.copy(CHAT, modules / "c_chat.wasm")
        shutil.copy(CHAT, modules / "c_chat_paced.wasm")
        host_config = HostConfig(backend=f"scripted:{SCRIPT}", cache_dir=None, max_retries=0)
        for executor in EXECUTORS:
            result = _served_vs_host(tmp, modules, host_config, count, repeats, executor)
            rows.append(_row(executor, count, result))
        # What a user sees: the same short runs against a model that takes
        # MODEL_MS to answer (bench.latency_server, as P4's).
        server_argv = [sys.executable, "-m", "bench.latency_server", str(MODEL_MS)]
        with ServerProcess(None, server_argv) as model:
            slow = HostConfig(base_url=model.base_url, model="bench", cache_dir=None,
                              max_retries=0)
            result = _served_vs_host(tmp, modules, slow, count, repeats, "auto")
            rows.append(_row("auto", count, result, MODEL_MS))
        paced = tmp / "paced.json"
        paced.write_text(json.dumps({"default": {"content": "slow " * 20,
                                                 "delay_ms": 100}}))
        with ServeProcess(modules, tmp / "state-lag", paced) as url:
            lags = [lag for _ in range(3 if quick else 100) for lag in _lag(url)]
    lag_p99 = round(percentile(lags, 99) * 1e3, 2) if lags else float("nan")
    rows.append(
        Row("SV.event_lag", "SV", "event delivery lag over SSE (event ts -> client), "
            f"p99 {lag_p99} ms; goal p99 <= 10 ms ({'met' if lag_p99 <= 10 else 'not met'})",
            "-", "ms", Series(lags) if lags else None, None,
            extra={"lag_p99_ms": lag_p99, "events": len(lags)}))
    return rows


EXECUTORS = ("auto", "threads", "processes")
MODEL_MS = 20

if __name__ == "__main__" and sys.argv[1:2] == ["client"]:
    asyncio.run(_client_batches(sys.argv[2], int(sys.argv[3])))
