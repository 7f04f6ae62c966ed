"""SV: `spearpy serve` against the same runs through `Host` directly.

(a) 64 concurrent short runs (wasm-samples/c_chat.wasm on the scripted model:
    one completion over loopback HTTP) through the service (`POST /v1/runs`
    with `wait`, a real uvicorn on 127.0.0.1, the client on threads of this
    process) vs the same 64 runs on threads of one Host: per-run latency p50
    and p99, and runs per second;
(b) event delivery lag: for a run whose completions arrive 100 ms apart, the
    time from an event's own timestamp to its arrival at an SSE subscriber.
"""

from __future__ import annotations

import concurrent.futures
import json
import shutil
import tempfile
import time
from pathlib import Path

import httpx

from bench.stats import Row, Series, Target, percentile
from spearpy.config import HostConfig
from spearpy.host import Host
from spearpy.serve.app import create_app
from spearpy.serve.config import ServeConfig
from spearpy.serve.server import BackgroundServer

ROOT = Path(__file__).resolve().parent.parent
CHAT = ROOT / "wasm-samples" / "c_chat.wasm"
SCRIPT = ROOT / "wasm-samples" / "scripts" / "chat.json"
N = 64


def _timed(fn: object, count: int) -> tuple[list[float], float]:
    started = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(max_workers=count) as pool:
        times = list(pool.map(lambda _: _one(fn), range(count)))
    return times, time.perf_counter() - started


def _one(fn: object) -> float:
    t0 = time.perf_counter()
    fn()  # type: ignore[operator]
    return time.perf_counter() - t0


def _lag(base_url: str, tmp: Path) -> list[float]:
    """Seconds from each event's timestamp to its arrival over SSE."""
    lags: list[float] = []
    with httpx.Client(base_url=base_url, timeout=60) as client:
        run = client.post("/v1/runs", json={"module": "c_chat_paced"}).json()
        subscribed = time.time()
        with client.stream("GET", f"/v1/runs/{run['id']}/events") as events:
            for line in events.iter_lines():
                if not line.startswith("data:"):
                    continue
                record = json.loads(line[5:])
                if record.get("ts", 0) > subscribed:
                    lags.append(time.time() - record["ts"])
                if record.get("kind") == "run_end":
                    break
    return lags


def run(quick: bool) -> list[Row]:
    count = 16 if quick else N
    with tempfile.TemporaryDirectory(prefix="bench-sv-") as tmp_name:
        tmp = Path(tmp_name)
        modules = tmp / "modules"
        modules.mkdir()
        shutil.copy(CHAT, modules / "c_chat.wasm")
        shutil.copy(CHAT, modules / "c_chat_paced.wasm")
        host_config = HostConfig(backend=f"scripted:{SCRIPT}", cache_dir=None, max_retries=0)
        with Host(host_config) as host:
            host.run(CHAT)  # compile once, as the service's first run does
            direct, direct_wall = _timed(lambda: host.run(CHAT), count)
        config = ServeConfig(modules_dir=modules, state_dir=tmp / "state", host=host_config,
                             max_concurrent=count)
        with BackgroundServer(create_app(config), grace=1.0) as server, \
                httpx.Client(base_url=server.url, timeout=120,
                             limits=httpx.Limits(max_connections=count)) as client:

            def through_service() -> None:
                reply = client.post("/v1/runs", json={"module": "c_chat", "wait": True})
                assert reply.status_code == 201, reply.text

            through_service()
            served, served_wall = _timed(through_service, count)
        paced = tmp / "paced.json"
        paced.write_text(json.dumps({"default": {"content": "slow " * 20,
                                                 "delay_ms": 100}}))
        paced_config = ServeConfig(modules_dir=modules, state_dir=tmp / "state2",
                                   host=HostConfig(backend=f"scripted:{paced}", cache_dir=None,
                                                   max_retries=0))
        with BackgroundServer(create_app(paced_config), grace=1.0) as server:
            lags = [lag for _ in range(3 if quick else 10) for lag in _lag(server.url, tmp)]
    p99 = round(percentile(served, 99) * 1e3, 1), round(percentile(direct, 99) * 1e3, 1)
    lag_p99 = round(percentile(lags, 99) * 1e3, 2) if lags else float("nan")
    return [
        Row("SV.runs_p50", "SV", f"{count} concurrent short runs through spearpy serve "
            "(POST /v1/runs wait=true, real uvicorn)",
            f"the same {count} runs on threads of one Host", "ms", Series(served),
            Series(direct), Target("<=", 1.3),
            note=f"p99 {p99[0]} ms vs {p99[1]} ms; {count / served_wall:.0f} vs "
                 f"{count / direct_wall:.0f} runs/s",
            extra={"runs_per_s": {"serve": round(count / served_wall, 1),
                                  "host": round(count / direct_wall, 1)}}),
        Row("SV.event_lag", "SV", "event delivery lag over SSE (event ts -> client), "
            f"p99 {lag_p99} ms; goal p99 <= 10 ms ({'met' if lag_p99 <= 10 else 'not met'})",
            "-", "ms", Series(lags) if lags else None, None,
            extra={"lag_p99_ms": lag_p99, "events": len(lags)}),
    ]
