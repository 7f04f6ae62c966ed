"""User streams through `spearpy serve`: a real uvicorn on 127.0.0.1, a real
WebSocket client (`websockets`), the guests in wasm-samples/: the echo's data
path runs for the C sample and its Rust twin (spear_guest's Stream API)."""

from __future__ import annotations

import asyncio
import json
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from spearpy import Host
from spearpy.serve import BackgroundServer, ServeConfig, create_app
from spearpy.serve.streams_auth import StreamTokens
from spearpy.streams import StreamLimits, ssf

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "wasm-samples"
SUBPROTOCOL = "spear.stream.v1"
LIMITS = StreamLimits(max_frame_bytes=64 << 10, max_queue_bytes=256 << 10, max_queue_frames=64)
ECHOES = ["c_user_stream_echo", "rust_user_stream_echo"]
each_echo = pytest.mark.parametrize("echo", ECHOES)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BackgroundServer]:
    where = tmp_path_factory.mktemp("streams")
    mods = where / "modules"
    mods.mkdir()
    for name in (*ECHOES, "c_stream_chat", "c_hello"):
        shutil.copy(SAMPLES / f"{name}.wasm", mods / f"{name}.wasm")
    host = Host(backend=f"scripted:{SAMPLES / 'scripts' / 'stream_chat.json'}",
                model="scripted", cache_dir=None, max_retries=0, timeout=120)
    app = create_app(ServeConfig(modules_dir=mods, state_dir=where / "state"), host)
    app.state.service.streams.limits = LIMITS
    with BackgroundServer(app) as running:
        yield running
    host.close()


@pytest.fixture
def client(server: BackgroundServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, timeout=30) as http:
        yield http


def start_run(http: httpx.Client, module: str = "c_user_stream_echo") -> str:
    response = http.post("/v1/runs", json={"module": module})
    assert response.status_code == 201, response.text
    run_id: str = response.json()["id"]
    return run_id


def session(http: httpx.Client, run_id: str) -> dict[str, Any]:
    response = http.post(f"/api/v1/executions/{run_id}/streams/session", json={})
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def finished(http: httpx.Client, run_id: str, timeout: float = 30.0) -> dict[str, Any]:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        run: dict[str, Any] = http.get(f"/v1/runs/{run_id}").json()
        if run["status"] != "running":
            return run
        time.sleep(0.05)
    raise AssertionError(f"run {run_id} still running")


def ws_connect(url: str, **options: Any) -> Any:
    options.setdefault("subprotocols", [SUBPROTOCOL])
    return connect(url, compression=None, proxy=None, open_timeout=10, **options)


def events(http: httpx.Client, run_id: str) -> list[dict[str, Any]]:
    with http.stream("GET", f"/v1/runs/{run_id}/events") as response:
        return [json.loads(line[6:]) for line in response.iter_lines()
                if line.startswith("data: ")]


async def recv_frame(ws: ClientConnection, timeout: float = 10.0) -> ssf.Frame:
    raw = await asyncio.wait_for(ws.recv(decode=False), timeout)
    assert isinstance(raw, bytes)
    return ssf.decode(raw)


# ---- the data path ---------------------------------------------------------------------


@each_echo
def test_frames_come_back_in_order_with_seq_preserved(client: httpx.Client, echo: str) -> None:
    run_id = start_run(client, echo)
    url = session(client, run_id)["ws_url"]  # as SPEAR's gateway gives it: token in the query
    sent = [ssf.build(1, 1000 + i, bytes([i % 256]) * (i * 37 % 3000), b'{"i":%d}' % i)
            for i in range(200)]

    async def talk() -> list[bytes]:
        async with ws_connect(url) as ws:
            assert ws.subprotocol == SUBPROTOCOL
            got: list[bytes] = []

            async def send_all() -> None:
                for frame in sent:
                    await ws.send(frame)

            sender = asyncio.create_task(send_all())
            while len(got) < len(sent):
                got.append(await asyncio.wait_for(ws.recv(decode=False), 10))
            await sender
            return got

    assert asyncio.run(talk()) == sent
    run = finished(client, run_id)
    assert (run["outcome"], run["exit_code"]) == ("exited", 0)
    assert "session closed: 200 frames echoed" in run["stderr"]
    kinds = [e["kind"] for e in events(client, run_id)]
    assert "stream_open" in kinds and "stream_session" in kinds


@each_echo
def test_two_streams_at_once_each_keep_their_order(client: httpx.Client, echo: str) -> None:
    run_id = start_run(client, echo)
    token = session(client, run_id)["token"]
    url = f"ws://127.0.0.1:{client.base_url.port}/api/v1/executions/{run_id}/streams/ws"

    async def talk() -> dict[int, list[int]]:
        async with ws_connect(url, additional_headers={"Authorization": f"Bearer {token}"}) as ws:
            for i in range(1, 101):
                await ws.send(ssf.build(1, i, b"one %d" % i))
                await ws.send(ssf.build(2, i, b"two %d" % i))
            seqs: dict[int, list[int]] = {1: [], 2: []}
            for _ in range(200):
                frame = await recv_frame(ws)
                seqs[frame.stream_id].append(frame.seq)
                assert frame.data == (b"one %d" if frame.stream_id == 1 else b"two %d") % frame.seq
            return seqs

    assert asyncio.run(talk()) == {1: list(range(1, 101)), 2: list(range(1, 101))}
    assert finished(client, run_id)["exit_code"] == 0


def test_a_streamed_question_gets_the_tool_loop_answer(client: httpx.Client) -> None:
    run_id = start_run(client, "c_stream_chat")
    url = session(client, run_id)["ws_url"]

    async def ask() -> list[ssf.Frame]:
        async with ws_connect(url) as ws:
            await ws.send(ssf.build(3, 1, b"what is 7 + 35?"))
            frames = [await recv_frame(ws)]
            while frames[-1].meta_json() != {"final": True}:
                frames.append(await recv_frame(ws))
            return frames

    frames = asyncio.run(ask())
    assert b"".join(f.data for f in frames) == b"7 + 35 = 42\n"
    assert [f.seq for f in frames] == list(range(1, len(frames) + 1))
    run = finished(client, run_id)
    assert run["exit_code"] == 0 and "session closed: 1 questions answered" in run["stderr"]
    assert run["usage"]["total_tokens"] > 0


@each_echo
def test_client_disconnect_is_a_hangup_for_the_guest(client: httpx.Client, echo: str) -> None:
    run_id = start_run(client, echo)
    url = session(client, run_id)["ws_url"]

    async def hang_up() -> None:
        ws = await ws_connect(url)
        await ws.send(ssf.build(1, 1, b"ping"))
        assert (await recv_frame(ws)).data == b"ping"
        ws.transport.abort()  # no close frame: the connection just goes

    asyncio.run(hang_up())
    run = finished(client, run_id)
    assert run["exit_code"] == 0
    assert "stream 1 hung up" in run["stderr"]  # EPOLLHUP on its stream fd
    closes = [e for e in events(client, run_id)
              if e["kind"] == "stream_session" and e["action"] == "close"]
    assert closes[0]["reason"] == "client closed" and closes[0]["frames_in"] == 1


# ---- who may connect ---------------------------------------------------------------------


def _refused(url: str, **options: Any) -> int:
    async def attempt() -> int:
        try:
            async with ws_connect(url, **options):
                return 101
        except InvalidStatus as exc:
            body = json.loads(exc.response.body or b"{}")
            assert body.get("status") == exc.response.status_code, body
            return int(exc.response.status_code)

    return asyncio.run(attempt())


def test_tokens_and_the_subprotocol_are_enforced(client: httpx.Client,
                                                  server: BackgroundServer) -> None:
    run_id, other = start_run(client), start_run(client)
    base = f"ws://127.0.0.1:{server.port}/api/v1/executions/{run_id}/streams/ws"
    token = session(client, run_id)["token"]
    other_token = session(client, other)["token"]
    assert _refused(base) == 401
    assert _refused(base + "?token=not-a-token") == 401
    assert _refused(base + "?token=" + other_token) == 403  # scoped to its own run
    assert _refused(base + "?token=" + token, subprotocols=["chat"]) == 400
    assert _refused(base + "?token=" + token, subprotocols=None) == 400
    assert _refused(f"ws://127.0.0.1:{server.port}/api/v1/executions/nope/streams/ws"
                    f"?token={token}") == 403
    # One client session at a time: a second one is refused while the first is on.

    async def second_is_busy() -> int:
        async with ws_connect(base + "?token=" + token):
            return _status(await _attempt(base + "?token=" + token))

    assert asyncio.run(second_is_busy()) == 409
    tokens = server.app.state.service.streams.tokens
    server.app.state.service.streams.tokens = StreamTokens(ttl_s=0.05)
    try:
        short = session(client, other)["token"]
        time.sleep(0.1)
        assert _refused(base.replace(run_id, other) + "?token=" + short) == 401  # expired
    finally:
        server.app.state.service.streams.tokens = tokens
    assert client.post("/api/v1/executions/nope/streams/session", json={}).status_code == 404
    for rid in (run_id, other):
        client.delete(f"/v1/runs/{rid}")
        finished(client, rid)
    ended = client.post(f"/api/v1/executions/{run_id}/streams/session", json={})
    assert ended.status_code == 409 and ended.json()["type"].endswith("run-ended")


async def _attempt(url: str) -> InvalidStatus | None:
    try:
        async with ws_connect(url):
            return None
    except InvalidStatus as exc:
        return exc


def _status(exc: InvalidStatus | None) -> int:
    return 101 if exc is None else int(exc.response.status_code)


def test_the_websocket_log_line_hides_the_token(server: BackgroundServer) -> None:
    import logging

    record = logging.LogRecord("uvicorn.error", logging.INFO, __file__, 1,
                               '%s - "WebSocket %s" [accepted]',
                               ("127.0.0.1:5", "/api/v1/executions/x/streams/ws?token=SECRET"),
                               None)
    for log_filter in logging.getLogger("uvicorn.error").filters:
        assert not isinstance(log_filter, logging.Filter) or log_filter.filter(record)
    assert "SECRET" not in record.getMessage() and "token=[redacted]" in record.getMessage()


# ---- what a client may send -------------------------------------------------------------


@pytest.mark.parametrize(("raw", "code", "reason"), [
    (b"garbage", 1008, "truncated"),
    (b"XPST" + ssf.build(1, 1, b"x")[4:], 1008, "bad magic"),
    (ssf.build(1, 1, b"x")[:4] + b"\x02\x00" + ssf.build(1, 1, b"x")[6:], 1008, "version 2"),
    (ssf.build(1, 1, b"abc")[:-1], 1008, "meta_len 0 + data_len 3"),
    (ssf.build(1, 1, b"x" * (LIMITS.max_frame_bytes + 1)), 1009, "over the"),
])
@each_echo
def test_a_malformed_frame_closes_the_client_with_a_reason(client: httpx.Client, raw: bytes,
                                                           code: int, reason: str,
                                                           echo: str) -> None:
    run_id = start_run(client, echo)
    url = session(client, run_id)["ws_url"]

    async def send_bad() -> ConnectionClosed:
        async with ws_connect(url, max_size=None) as ws:
            await ws.send(ssf.build(1, 1, b"fine"))
            assert (await recv_frame(ws)).data == b"fine"  # what came before is served
            await ws.send(raw)
            with pytest.raises(ConnectionClosed) as closed:
                await asyncio.wait_for(ws.recv(), 10)
            return closed.value

    closed = asyncio.run(send_bad())
    assert closed.rcvd is not None and closed.rcvd.code == code
    assert "malformed SSF frame" in closed.rcvd.reason and reason in closed.rcvd.reason
    run = finished(client, run_id)
    assert (run["outcome"], run["exit_code"]) == ("exited", 0)  # the guest carried on to its end
    drops = [e for e in events(client, run_id) if e["kind"] == "stream_drop"]
    assert drops and drops[0]["reason"] == "malformed"


@each_echo
def test_a_client_that_never_reads_holds_the_guest_not_the_memory(
        client: httpx.Client, server: BackgroundServer, echo: str) -> None:
    run_id = start_run(client, echo)
    url = session(client, run_id)["ws_url"]
    frame = ssf.build(1, 1, b"z" * (16 << 10))
    hubs = server.app.state.service.streams.hubs

    async def flood() -> tuple[int, list[int], list[int]]:
        async with ws_connect(url) as ws:
            sent = 0

            async def send_forever() -> None:
                nonlocal sent
                while True:
                    await ws.send(frame)
                    sent += len(frame)

            before = _rss()
            task = asyncio.create_task(send_forever())
            last, started = -1, time.monotonic()
            still_since = started
            while time.monotonic() - still_since < 1.0:  # stuck for a second: held back
                await asyncio.sleep(0.1)
                # Unbounded buffering would take it all: give up long before memory does.
                assert sent < 256 << 20 and time.monotonic() - started < 30, sent
                if sent != last:
                    last, still_since = sent, time.monotonic()
            stuck_at = sent
            rss = [_rss()]
            await asyncio.sleep(1.0)
            rss.append(_rss())
            hub = hubs[run_id]
            assert hub.session is not None
            queued = [(len(c.inbound), c.inbound.nbytes, len(c.outbound), c.outbound.nbytes)
                      for c in hub.channels_of(hub.session)]
            task.cancel()
            ws.transport.abort()  # a client that never reads does not close politely either
            assert sent == stuck_at  # nothing more got through while it waited
            return stuck_at, [rss[0] - before, rss[1] - rss[0]], [q for r in queued for q in r]

    stuck_at, (flood_growth, held_growth), (_, in_b, _, out_b) = asyncio.run(flood())
    print(f"held back after {stuck_at} bytes; RSS +{flood_growth} B during the flood, "
          f"+{held_growth} B in the next second")
    # Both queues full to their bounds, and no more than them.
    assert in_b <= LIMITS.max_queue_bytes and out_b <= LIMITS.max_queue_bytes
    assert out_b > LIMITS.max_queue_bytes - len(frame)  # the guest is held at -EAGAIN
    # The rest of what the client sent waits in the kernel's socket buffers (MBs on
    # loopback), not in the service: its memory barely moves, and not at all once held.
    assert stuck_at > 4 * LIMITS.max_queue_bytes
    assert flood_growth < 8 << 20
    assert held_growth < 1 << 20
    run = finished(client, run_id)
    assert run["exit_code"] == 0


def _rss() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


# ---- spearpy stream URL ----------------------------------------------------------------


def _spearpy_stream(*args: str, stdin: bytes) -> Any:
    import subprocess
    import sys

    cmd = [sys.executable, "-c", "from spearpy.cli import main; main()", "stream", *args]
    return subprocess.run(cmd, input=stdin, capture_output=True, timeout=60, check=False)


def test_spearpy_stream_talks_to_a_served_run(client: httpx.Client,
                                              server: BackgroundServer) -> None:
    run_id = start_run(client)
    proc = _spearpy_stream(f"{server.url}/v1/runs/{run_id}", "--linger", "0.3",
                           stdin=b"hello\nworld\n")
    assert proc.returncode == 0, proc.stderr.decode()
    assert proc.stdout == b"hello\nworld\n"
    run = finished(client, run_id)
    assert run["exit_code"] == 0 and "session closed: 2 frames echoed" in run["stderr"]
    # SPEAR's path and a session's ws_url work as well; an ended run is refused.
    chat = start_run(client, "c_stream_chat")
    proc = _spearpy_stream(session(client, chat)["ws_url"], "--stream-id", "9",
                           stdin=b"what is 7 + 35?\n")
    assert proc.returncode == 0 and proc.stdout == b"7 + 35 = 42\n", proc.stderr.decode()
    proc = _spearpy_stream(f"{server.url}/api/v1/executions/{run_id}", stdin=b"late\n")
    assert proc.returncode == 1 and b"409" in proc.stderr and b"has ended" in proc.stderr
