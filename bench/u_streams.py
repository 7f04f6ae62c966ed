"""U: user streams over WebSocket. Both servers run in their own processes;
the client (this process) is the same code for both, on loopback, without
compression.

(a) echo round trip of a 1 KiB SSF frame: WebSocket -> `spearpy serve` ->
    the guest (wasm-samples/c_user_stream_echo.wasm: epoll, read, write) ->
    back, vs a plain `websockets` echo server; p50 and p99 per round trip,
    batches interleaved. For information, the same echo written directly on
    uvicorn + Starlette (the stack `spearpy serve` runs on, no hub, no guest)
    against the same baseline, and spearpy against it: what the stack costs
    and what the hub and the guest add on top;
(b) guest -> client throughput of 64 KiB frames: bench/wat/stream_source.wat
    writes one frame back N times (waiting on EPOLLOUT when the queue is
    full), vs the plain server sending the same frame N times.
"""

from __future__ import annotations

import asyncio
import gc
import json
import shutil
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import wasmtime

from bench.stats import Row, Series, Target, percentile
from spearpy.streams import ssf

ROOT = Path(__file__).resolve().parent.parent
ECHO_WASM = ROOT / "wasm-samples" / "c_user_stream_echo.wasm"
SOURCE_WAT = Path(__file__).parent / "wat" / "stream_source.wat"
SUBPROTOCOL = "spear.stream.v1"
BIG = 64 << 10


class Process:
    """A server in its own process that prints its URL on a line of stderr."""

    def __init__(self, argv: list[str], marker: str) -> None:
        self._proc = subprocess.Popen(argv, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                      text=True, cwd=ROOT)
        assert self._proc.stderr is not None
        for line in self._proc.stderr:
            if marker in line:
                self.url = line.split(marker, 1)[1].strip().rstrip("/")
                return
        raise RuntimeError(f"{argv[:4]} did not start")

    def stop(self) -> None:
        self._proc.terminate()
        try:
            self._proc.wait(20)
        except subprocess.TimeoutExpired:
            self._proc.kill()


def _connect(url: str) -> Any:
    from websockets.asyncio.client import connect
    from websockets.typing import Subprotocol

    return connect(url, subprotocols=[Subprotocol(SUBPROTOCOL)], compression=None, proxy=None,
                   max_size=None)


def _stream_url(base: str, module: str) -> str:
    with httpx.Client(base_url=base, timeout=30, trust_env=False) as http:
        run = http.post("/v1/runs", json={"module": module})
        run.raise_for_status()
        created = http.post(f"/api/v1/executions/{run.json()['id']}/streams/session",
                            json={})
        created.raise_for_status()
        url: str = created.json()["ws_url"]
        return url


async def _round_trips(ws: Any, frame: bytes, count: int, into: list[float]) -> None:
    for _ in range(count):
        start = time.perf_counter()
        await ws.send(frame)
        await ws.recv(decode=False)
        into.append(time.perf_counter() - start)


async def _burst(ws: Any, request: bytes, count: int) -> float:
    """Seconds from asking for `count` frames to having all of them."""
    start = time.perf_counter()
    await ws.send(request)
    for _ in range(count):
        await ws.recv(decode=False)
    return time.perf_counter() - start


async def _measure(spear: str, plain: str, stack: str, quick: bool) -> list[Row]:
    rounds, batch = (6, 100) if quick else (20, 200)
    frame = ssf.build(1, 7, b"k" * (1024 - ssf.HEADER_LEN))
    echo: dict[str, list[float]] = {"spearpy": [], "plain": [], "stack": []}
    async with _connect(_stream_url(spear, "c_user_stream_echo")) as s_ws, \
            _connect(plain + "/echo") as p_ws, _connect(stack + "/echo") as k_ws:
        sockets = {"spearpy": s_ws, "plain": p_ws, "stack": k_ws}
        for ws in sockets.values():
            await _round_trips(ws, frame, batch, [])  # warm-up
        for _ in range(rounds):
            for name, ws in sockets.items():
                gc.collect()
                gc.disable()
                try:
                    await _round_trips(ws, frame, batch, echo[name])
                finally:
                    gc.enable()
    count = 32 if quick else 64
    request = ssf.build(1, 1, struct.pack("<I", count) + b"t" * (BIG - 4))
    burst: dict[str, list[float]] = {"spearpy": [], "plain": []}
    async with _connect(_stream_url(spear, "stream_source")) as s_ws, \
            _connect(plain + "/source") as p_ws:
        sockets = {"spearpy": s_ws, "plain": p_ws}
        for ws in sockets.values():
            await _burst(ws, request, count)  # warm-up
        for _ in range(3 if quick else 10):
            for name, ws in sockets.items():
                gc.collect()
                burst[name].append(await _burst(ws, request, count) / count)
    return _rows(echo, burst, len(request))


def _rows(echo: dict[str, list[float]], burst: dict[str, list[float]], size: int) -> list[Row]:
    def p99(values: list[float]) -> float:
        return round(percentile(values, 99) * 1e6, 1)

    def mbps(values: list[float]) -> float:
        return round(size / percentile(values, 50) / 1e6, 1)

    spear_mbps = mbps(burst["spearpy"])
    return [
        Row("U.echo_1k", "U", "1 KiB frame round trip: WebSocket -> spearpy serve -> guest "
            "echo (epoll, read, write) -> back",
            "the same frame through a plain websockets echo server (its own process)", "us",
            Series(echo["spearpy"]), Series(echo["plain"]), Target("<=", 2.0),
            note=f"p99 {p99(echo['spearpy'])} us vs {p99(echo['plain'])} us",
            extra={"p99_us": {"spearpy": p99(echo["spearpy"]), "plain": p99(echo["plain"]),
                              "uvicorn_starlette": p99(echo["stack"])},
                   "round_trips": len(echo["spearpy"])}),
        Row("U.echo_1k_stack", "U", "(info) the same echo written directly on uvicorn + "
            "Starlette: the stack spearpy serve runs on, no hub, no guest",
            "the plain websockets echo server", "us", Series(echo["stack"]),
            Series(echo["plain"]), note=f"p99 {p99(echo['stack'])} us"),
        Row("U.echo_1k_added", "U", "(info) spearpy's echo (hub, two thread hand-offs, guest)",
            "the uvicorn + Starlette echo", "us", Series(echo["spearpy"]),
            Series(echo["stack"])),
        Row("U.source_64k", "U", "64 KiB frames guest -> client: a WAT guest writing one frame "
            "N times through spearpy serve (per frame)",
            "a plain websockets server sending the same frame N times", "us",
            Series(burst["spearpy"]), Series(burst["plain"]),
            note=f"{spear_mbps} MB/s vs {mbps(burst['plain'])} MB/s; goal >= 200 MB/s "
                 f"({'met' if spear_mbps >= 200 else 'not met'})",
            extra={"mb_per_s": {"spearpy": spear_mbps, "plain": mbps(burst["plain"])}}),
    ]


def run(quick: bool) -> list[Row]:
    with tempfile.TemporaryDirectory(prefix="bench-u-") as tmp:
        modules = Path(tmp) / "modules"
        modules.mkdir()
        shutil.copy(ECHO_WASM, modules / ECHO_WASM.name)
        (modules / "stream_source.wasm").write_bytes(
            bytes(wasmtime.wat2wasm(SOURCE_WAT.read_text())))
        spear = Process([sys.executable, "-m", "spearpy", "serve", "--modules", str(modules),
                         "--state-dir", str(Path(tmp) / "state"), "--port", "0",
                         "--no-access-log", "--no-cache"], "listening on ")
        try:
            plain = Process([sys.executable, "-m", "bench.u_streams", "--plain-server"],
                            "plain server on ")
            stack = Process([sys.executable, "-m", "bench.u_streams", "--stack-server"],
                            "stack server on ")
            try:
                return asyncio.run(_measure(spear.url, plain.url.replace("http", "ws"),
                                            stack.url.replace("http", "ws"), quick))
            finally:
                plain.stop()
                stack.stop()
        finally:
            spear.stop()


# ---- the baseline server ------------------------------------------------------------


async def _plain_server() -> None:
    from websockets.asyncio.server import ServerConnection, serve
    from websockets.typing import Subprotocol

    async def handler(ws: ServerConnection) -> None:
        source = ws.request is not None and ws.request.path == "/source"
        async for message in ws:
            if not isinstance(message, bytes):
                continue
            if not source:
                await ws.send(message)
                continue
            meta_len = struct.unpack_from("<I", message, 24)[0]
            for _ in range(struct.unpack_from("<I", message, ssf.HEADER_LEN + meta_len)[0]):
                await ws.send(message)

    async with serve(handler, "127.0.0.1", 0, subprotocols=[Subprotocol(SUBPROTOCOL)],
                     compression=None, max_size=None) as server:
        port = next(iter(server.sockets)).getsockname()[1]
        print(f"plain server on http://127.0.0.1:{port}", file=sys.stderr, flush=True)
        await asyncio.Future()


def _stack_server() -> None:
    import socket

    import uvicorn
    from starlette.applications import Starlette
    from starlette.routing import WebSocketRoute
    from starlette.websockets import WebSocket

    async def echo(ws: WebSocket) -> None:
        await ws.accept(subprotocol=SUBPROTOCOL)
        while True:
            message = await ws.receive()
            if message["type"] == "websocket.disconnect":
                return
            if message.get("bytes") is not None:
                await ws.send_bytes(message["bytes"])

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    print(f"stack server on http://127.0.0.1:{sock.getsockname()[1]}", file=sys.stderr,
          flush=True)
    app = Starlette(routes=[WebSocketRoute("/echo", echo)])
    uvicorn.Server(uvicorn.Config(app, log_level="warning")).run(sockets=[sock])


if __name__ == "__main__" and sys.argv[1:] == ["--plain-server"]:
    asyncio.run(_plain_server())
elif __name__ == "__main__" and sys.argv[1:] == ["--stack-server"]:
    _stack_server()
elif __name__ == "__main__":
    print(json.dumps([r.as_dict() for r in run(quick="--quick" in sys.argv)], indent=2))
