"""User streams for an embedder: Host.start(streams=True), handle.open_stream,
send/recv and their async forms, and the events and metrics a stream run leaves.
The echo guest runs as the C sample and as its Rust twin."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from spearpy.observe.events import Event, FanOut
from spearpy.observe.metrics import Metrics
from spearpy.streams import StreamClosed, StreamHub, StreamLimits

ROOT = Path(__file__).resolve().parents[1]
ECHO = ROOT / "wasm-samples" / "c_user_stream_echo.wasm"
ECHOES = [ECHO, ROOT / "wasm-samples" / "rust_user_stream_echo.wasm"]
each_echo = pytest.mark.parametrize("echo", ECHOES, ids=lambda p: p.stem)
CHAT = ROOT / "wasm-samples" / "c_stream_chat.wasm"


@each_echo
def test_send_recv_close_through_a_run_handle(make_host: Any, echo: Path) -> None:
    host = make_host()
    events: list[Event] = []
    registry = CollectorRegistry()
    handle = host.start(echo, streams=True, on_event=FanOut(events.append, Metrics(registry)))
    one, two = handle.open_stream(1), handle.open_stream(2)
    one.send(b"hello", meta={"lang": "en"})
    two.send(b"there")
    got = one.recv(timeout=10)
    assert got is not None
    assert (got.stream_id, got.seq, got.data, got.meta_json()) == (1, 1, b"hello",
                                                                   {"lang": "en"})
    assert (two.recv(timeout=10) or pytest.fail("no echo")).data == b"there"
    with pytest.raises(TimeoutError):
        one.recv(timeout=0.05)
    handle.close_streams()
    result = handle.result(timeout=30)
    assert (result.outcome, result.exit_code) == ("exited", 0)
    assert b"session closed: 2 frames echoed" in (result.stderr or b"")
    assert one.recv(timeout=1) is None  # the session is over: nothing more can come
    with pytest.raises(StreamClosed):
        one.send(b"late")

    kinds = [e.kind for e in events]
    assert kinds.count("stream_open") == 2 and kinds.count("stream_close") == 2
    close = next(e for e in events if e.kind == "stream_session" and e.data["action"] == "close")
    assert close.data["frames_in"] == 2 and close.data["frames_out"] == 2
    assert close.data["client"] == "api" and close.data["reason"] == "client closed"
    assert kinds.index("stream_session") < kinds.index("run_end")

    def sample(name: str, **labels: str) -> float:
        value = registry.get_sample_value(name, labels)
        return value or 0.0

    assert sample("spearpy_stream_opens_total", direction="bidi") == 2
    assert sample("spearpy_stream_frames_total", direction="in") == 2
    assert sample("spearpy_stream_bytes_total", direction="out") == close.data["bytes_out"]
    assert sample("spearpy_stream_sessions_total", client="api", end="closed") == 1


@each_echo
def test_async_send_and_recv(make_host: Any, echo: Path) -> None:
    host = make_host()
    handle = host.start(echo, streams=True)

    async def talk() -> list[bytes]:
        stream = handle.open_stream(5)
        for i in range(50):
            await stream.asend(b"%d" % i)
        frames = [await stream.arecv(timeout=10) for _ in range(50)]
        return [f.data for f in frames if f is not None]

    assert asyncio.run(talk()) == [b"%d" % i for i in range(50)]
    handle.close_streams()
    assert handle.result(timeout=30).exit_code == 0


@each_echo
def test_a_full_queue_holds_send_back_with_a_timeout(make_host: Any, echo: Path) -> None:
    host = make_host()
    hub = StreamHub(StreamLimits(max_queue_frames=2, max_frame_bytes=1024,
                                 max_queue_bytes=4096))
    handle = host.start(echo, streams=hub)
    stream = handle.open_stream(1)
    # Nobody reads the echoes: the guest stops at -EAGAIN, then stops reading.
    sent = 0
    with pytest.raises(TimeoutError):
        for _ in range(100):
            stream.send(b"x" * 100, timeout=0.5)
            sent += 1
    assert 2 <= sent <= 8  # two queues of two frames, and what the guest holds
    handle.close_streams()
    assert handle.result(timeout=30).exit_code == 0


def test_the_chat_guest_answers_a_question_sent_from_python(make_host: Any) -> None:
    host = make_host(backend=f"scripted:{ROOT / 'wasm-samples/scripts/stream_chat.json'}",
                     model="scripted")
    handle = host.start(CHAT, streams=True)
    stream = handle.open_stream(1)
    stream.send(b"what is 7 + 35?")
    words: list[Any] = []
    while not words or words[-1].meta_json() != {"final": True}:
        frame = stream.recv(timeout=30)
        assert frame is not None
        words.append(frame)
    assert b"".join(w.data for w in words) == b"7 + 35 = 42\n"
    handle.close_streams()
    assert handle.result(timeout=30).exit_code == 0


def test_open_stream_needs_streams(make_host: Any) -> None:
    handle = make_host().start(ROOT / "wasm-samples" / "c_hello.wasm", ["hi"])
    with pytest.raises(RuntimeError, match="streams=True"):
        handle.open_stream(1)
    handle.result(timeout=30)
    hub = StreamHub()
    with pytest.raises(ValueError):
        StreamLimits(max_queue_bytes=10, max_frame_bytes=100)
    make_host().run(ROOT / "wasm-samples" / "c_hello.wasm", ["hi"], streams=hub)
    with pytest.raises(RuntimeError, match="one run"):
        make_host().run(ROOT / "wasm-samples" / "c_hello.wasm", ["hi"], streams=hub)


@each_echo
def test_a_guest_waiting_for_a_client_honours_deadline_and_cancel(make_host: Any,
                                                                  echo: Path) -> None:
    import time

    host = make_host()
    started = time.monotonic()
    result = host.run(echo, streams=StreamHub(), limits={"timeout": 0.5})
    assert (result.outcome, result.exit_code) == ("timeout", 124)
    assert time.monotonic() - started < 5
    handle = host.start(echo, streams=True)
    handle.open_stream(1).send(b"connected, then nothing")
    time.sleep(0.2)
    handle.cancel()
    assert handle.result(timeout=5).outcome == "cancelled"
