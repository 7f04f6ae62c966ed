"""Realtime speech recognition (issue 20 part B): rtasr_* against a real
WebSocket server on 127.0.0.1 (spearpy.testing.ScriptedAsrServer).

Driven two ways: hostcall by hostcall from Python through a small WAT guest
bound to a real GuestRun (tests/wat/rtasr_probe.wat), and end to end by
c_mic_rtasr (SPEAR's mic_rtasr sample) under `spearpy run`, with a speech
WAV made by espeak-ng at test time going through the mic's file source.
Waits for the server's side poll with a bound only against a hung host;
nothing asserts on time.
"""

from __future__ import annotations

import base64
import json
import os
import struct
import subprocess
import sys
import threading
import time
import wave
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from spearpy import abi
from spearpy.audio.budget import EDQUOT
from spearpy.context import RunOptions
from spearpy.observe.events import LIMIT_HIT, RUN_START, Event
from spearpy.outcome import Outcome
from spearpy.testing import ScriptedAsrServer
from tests.mic_support import make_speech, needs_espeak
from tests.probe import Probe, wat_module

ROOT = Path(__file__).resolve().parents[1]
GUEST = ROOT / "wasm-samples" / "c_mic_rtasr.wasm"
HANG_GUARD_S = 120  # only against a hung host; nothing asserts on time
OUT, LEN, ARG, EV, PCM = 65536, 16, 1024, 32, 200_000
KEY_ENV = "SPEARPY_TEST_RTASR_KEY"
KEY = "sk-test-rtasr-0123456789abcdef"
PHRASES = ["hello from spear", "this is a test", "the third phrase", "number four",
           "number five", "number six", "number seven", "number eight"]
DELTA = "conversation.item.input_audio_transcription.delta"
COMPLETED = "conversation.item.input_audio_transcription.completed"


def wait_for(check: Callable[[], bool]) -> None:
    deadline = time.monotonic() + HANG_GUARD_S
    while not check():
        assert time.monotonic() < deadline, "the host hung"
        time.sleep(0.01)


class Asr(Probe):
    """The rtasr hostcalls called as the guest would, on a real GuestRun."""

    def __init__(self, host: Any, options: RunOptions | None = None) -> None:
        super().__init__(host, wat_module("rtasr_probe.wat"), options)

    def create(self) -> int:
        return int(self.call("p_rtasr_create"))

    def ctl(self, fd: int, cmd: int, arg: bytes | str | dict[str, Any] = b"") -> int:
        raw = arg if isinstance(arg, bytes) else (
            arg if isinstance(arg, str) else json.dumps(arg)).encode()
        self.run.memory.write(ARG, raw)
        self.u32(LEN, len(raw))
        return int(self.call("p_rtasr_ctl", fd, cmd, ARG, LEN))

    def set(self, fd: int, key: str, value: Any) -> int:
        return self.ctl(fd, 1, {"key": key, "value": value})

    def connect(self, fd: int, url: str | None = None) -> int:
        assert self.set(fd, "transport", "websocket") == 0
        return self.ctl(fd, 2)

    def get_json(self, fd: int, cmd: int) -> dict[str, Any]:
        self.u32(LEN, 60000)
        rc = int(self.call("p_rtasr_ctl", fd, cmd, OUT, LEN))
        assert rc > 0, rc
        value: dict[str, Any] = json.loads(self.run.memory.read(OUT, rc))
        return value

    def status(self, fd: int) -> dict[str, Any]:
        return self.get_json(fd, 3)

    def write(self, fd: int, pcm: bytes) -> int:
        self.run.memory.write(PCM, pcm)
        return int(self.call("p_rtasr_write", fd, PCM, len(pcm)))

    def read(self, fd: int, capacity: int = 60000) -> tuple[int, bytes]:
        self.u32(LEN, capacity)
        rc = int(self.call("p_rtasr_read", fd, OUT, LEN))
        return rc, (self.run.memory.read(OUT, rc) if rc >= 0 else b"")

    def wait(self, fd: int, timeout_ms: int, events: int = abi.EPOLLIN) -> int:
        """The fd's events from a fresh epoll set (0: none within the timeout)."""
        ep = int(self.call("p_ep_create"))
        assert int(self.call("p_ep_ctl", ep, abi.EPOLL_CTL_ADD, fd, events)) == 0
        self.u32(LEN, 8)
        n = int(self.call("p_ep_wait", ep, EV, LEN, timeout_ms))
        return self.u32(EV + 4) if n == 1 else 0

    def next_event(self, fd: int) -> bytes:
        """The next event, waiting for it as a guest would; fails on ERR/HUP."""
        events = self.wait(fd, -1)
        assert events & abi.EPOLLIN, (events, self.status(fd))
        rc, event = self.read(fd)
        assert rc > 0, rc
        return event

    def events_until(self, fd: int, kind: str) -> list[dict[str, Any]]:
        seen: list[dict[str, Any]] = []
        while not seen or seen[-1].get("type") != kind:
            seen.append(json.loads(self.next_event(fd)))
        return seen


@pytest.fixture
def asr(make_host: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    monkeypatch.setenv(KEY_ENV, KEY)
    made: list[Asr] = []

    def make(server: ScriptedAsrServer | None = None, options: RunOptions | None = None,
             **config: Any) -> Asr:
        if server is not None:
            config.setdefault("rtasr_url", server.url)
        config.setdefault("rtasr_api_key_env", KEY_ENV)
        a = Asr(make_host(base_url="http://127.0.0.1:9/v1", **config), options)
        made.append(a)
        return a

    yield make
    for a in made:
        for fd, _entry in a.run.fds.entries():
            a.run.fds.close(fd)
        a.close()


@pytest.fixture
def server() -> Iterator[ScriptedAsrServer]:
    with ScriptedAsrServer(PHRASES, ms_per_phrase=500) as s:
        yield s


def tone(ms: int) -> bytes:
    """Non-silent pcm16 at 24 kHz: `ms` milliseconds of it."""
    return struct.pack("<h", 3000) * 24 * ms


def rtasr_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("spearpy-rtasr")]


# ---- params, status, autoflush ----------------------------------------------------------


def test_params_status_and_autoflush_are_spears(asr: Any) -> None:
    a = asr()
    fd = a.create()
    status = a.status(fd)
    assert status == {"state": "Init", "last_error": None, "send_queue_bytes": 0,
                      "recv_queue_bytes": 0, "max_send_queue_bytes": 1 << 20,
                      "max_recv_queue_bytes": 1 << 20, "dropped_events": 0,
                      "audio_bytes_written": 0, "events_received": 0}
    assert a.set(fd, "model", "gpt-4o-mini-transcribe") == 0
    assert a.status(fd)["state"] == "Configured"
    assert a.ctl(fd, 1, "{not json") == abi.EINVAL
    assert a.ctl(fd, 1, {"value": 1}) == abi.EINVAL  # no key
    assert a.ctl(fd, 1) == abi.EINVAL  # no argument
    assert a.set(fd, "ws_url", "ws://127.0.0.1:1/steal-the-key") == abi.EACCES
    assert a.ctl(fd, 9) == abi.EINVAL
    assert a.ctl(999, 3) == abi.EBADF
    # SPEAR's default, then the sample's setting, then the legacy spelling.
    assert a.get_json(fd, 8) == {"strategy": "server_vad", "flush_on_close": False,
                            "vad": {"silence_ms": 500}, "client_commit": None}
    assert a.ctl(fd, 7, {"strategy": "server_vad", "vad": {"silence_ms": 600},
                         "flush_on_close": True}) == 0
    assert a.get_json(fd, 8) == {"strategy": "server_vad", "flush_on_close": True,
                            "vad": {"silence_ms": 600}, "client_commit": None}
    assert a.ctl(fd, 7, {"enabled": True, "mode": "silence", "silence_ms": 300}) == 0
    assert a.get_json(fd, 8)["vad"] == {"silence_ms": 300, "threshold": 0.5,
                                        "prefix_padding_ms": 300}
    assert a.ctl(fd, 7, {"strategy": "sometimes"}) == abi.EINVAL
    assert a.ctl(fd, 7, {"strategy": "server_vad", "vad": 5}) == abi.EINVAL
    assert a.set(fd, "max_send_queue_bytes", 1 << 40) == 0
    assert a.status(fd)["max_send_queue_bytes"] == 16 << 20  # capped: the host holds it
    assert int(a.call("p_rtasr_close", fd)) == 0
    assert a.ctl(fd, 3) == abi.EBADF


def test_bad_pointers_and_lengths_are_efault_or_einval(asr: Any,
                                                       server: ScriptedAsrServer) -> None:
    a = asr(server)
    fd = a.create()
    past = a.run.memory.size()
    assert int(a.call("p_rtasr_ctl", fd, 3, OUT, past)) == abi.EFAULT  # the length word
    a.u32(LEN, 4096)
    assert int(a.call("p_rtasr_ctl", fd, 3, past - 10, LEN)) == abi.EFAULT  # the answer
    assert int(a.call("p_rtasr_ctl", fd, 1, past - 10, LEN)) == abi.EFAULT  # the argument
    a.u32(LEN, 1 << 30)
    assert int(a.call("p_rtasr_ctl", fd, 1, ARG, LEN)) == abi.EINVAL  # never read: too long
    for ptr, length in ((past - 10, 960), (PCM, -1), (PCM, past), (-4, 8)):
        assert int(a.call("p_rtasr_write", fd, ptr, length)) == abi.EFAULT, (ptr, length)
    assert a.connect(fd) == 0
    assert a.wait(fd, -1) & abi.EPOLLIN
    a.u32(LEN, 4096)
    assert int(a.call("p_rtasr_read", fd, past - 10, LEN)) == abi.EFAULT
    assert int(a.call("p_rtasr_read", fd, OUT, past)) == abi.EFAULT
    assert json.loads(a.next_event(fd))["type"] == "session.created"  # kept through both
    assert a.status(fd)["send_queue_bytes"] == 0


# ---- the connection ---------------------------------------------------------------------


def test_audio_goes_up_and_transcripts_come_back(asr: Any, server: ScriptedAsrServer) -> None:
    a = asr(server)
    fd = a.create()
    assert a.set(fd, "model", "whisper-test") == 0
    assert a.ctl(fd, 7, {"strategy": "server_vad", "vad": {"silence_ms": 700}}) == 0
    assert a.connect(fd) == 0
    assert a.write(fd, tone(500)) == 24000  # SPEAR's rtasr_write answers the bytes queued
    events = a.events_until(fd, COMPLETED)
    assert [e["type"] for e in events[:2]] == ["session.created", "session.updated"]
    assert [e["delta"] for e in events if e["type"] == DELTA] == PHRASES[0].split()
    assert events[-1]["transcript"] == PHRASES[0]
    assert a.status(fd)["state"] == "Connected"
    session = server.sessions[0]
    assert session.path == "/v1/realtime?intent=transcription"
    assert session.headers["authorization"] == f"Bearer {KEY}"
    assert session.headers["openai-beta"] == "realtime=v1"
    assert session.updates == [{"type": "session.update", "session": {
        "input_audio_format": "pcm16", "input_audio_transcription": {"model": "whisper-test"},
        "turn_detection": {"type": "server_vad", "threshold": 0.5, "prefix_padding_ms": 300,
                           "silence_duration_ms": 700}}}]
    assert session.audio_bytes == 24000


def test_flush_commits_and_clear_clears(asr: Any, server: ScriptedAsrServer) -> None:
    a = asr(server)
    fd = a.create()
    assert a.connect(fd) == 0
    assert a.write(fd, tone(100)) == 4800  # less than a phrase's worth
    assert a.ctl(fd, 5) == 0
    events = a.events_until(fd, COMPLETED)
    assert "input_audio_buffer.committed" in [e["type"] for e in events]
    assert events[-1]["transcript"] == PHRASES[0]
    assert a.ctl(fd, 6) == 0
    a.events_until(fd, "input_audio_buffer.cleared")
    assert a.ctl(fd, 4, {"type": "conversation.item.create", "item": {}}) == 0
    assert a.ctl(fd, 4, "not json") == abi.EINVAL
    wait_for(lambda: bool(server.sessions[0].other_events))
    assert server.sessions[0].other_events == [{"type": "conversation.item.create", "item": {}}]
    assert (server.sessions[0].commits, server.sessions[0].clears) == (1, 1)


def test_a_small_buffer_gets_enospc_and_the_event_stays(asr: Any,
                                                         server: ScriptedAsrServer) -> None:
    a = asr(server)
    fd = a.create()
    assert a.connect(fd) == 0
    assert a.wait(fd, -1) & abi.EPOLLIN
    rc, _ = a.read(fd, capacity=4)
    assert rc == abi.ENOSPC
    need = a.u32(LEN)
    assert need > 4
    rc, event = a.read(fd, capacity=need)
    assert rc == need and json.loads(event)["type"] == "session.created"
    assert json.loads(a.next_event(fd))["type"] == "session.updated"
    assert a.read(fd)[0] == abi.EAGAIN  # nothing more until audio comes


def test_a_full_send_queue_is_eagain_until_it_drains(asr: Any, server: ScriptedAsrServer) -> None:
    a = asr(server)
    fd = a.create()
    assert a.set(fd, "max_send_queue_bytes", 2000) == 0
    assert a.wait(fd, 0, abi.EPOLLOUT) & abi.EPOLLOUT
    assert a.write(fd, tone(20)) == 960  # queued before connect, as SPEAR
    assert a.write(fd, tone(20)) == 960
    assert a.write(fd, tone(20)) == abi.EAGAIN
    assert a.write(fd, tone(60)) == abi.EINVAL  # larger than the whole queue: never fits
    assert a.wait(fd, 0, abi.EPOLLOUT) == 0
    assert a.connect(fd) == 0
    assert a.wait(fd, -1, abi.EPOLLOUT) & abi.EPOLLOUT  # the connection drained it
    assert a.write(fd, tone(20)) == 960
    wait_for(lambda: server.audio_bytes == 3 * 960)


def test_a_dropped_connection_is_err_with_a_clear_status(asr: Any) -> None:
    with ScriptedAsrServer(PHRASES, fault="drop", fault_after_bytes=1) as server:
        a = asr(server)
        fd = a.create()
        assert a.connect(fd) == 0
        assert a.write(fd, tone(20)) == 960
        while not (events := a.wait(fd, -1, abi.EPOLLIN | abi.EPOLLERR)) & abi.EPOLLERR:
            assert a.read(fd)[0] > 0, events  # session.created / updated came first
        status = a.status(fd)
        assert status["state"] == "Error"
        assert "dropped without a close frame" in status["last_error"]
        assert a.write(fd, tone(20)) == abi.EIO
        assert a.ctl(fd, 5) == abi.EIO
        assert a.ctl(fd, 2) == abi.EIO


@pytest.mark.parametrize("retries", [0, 2])
def test_a_busy_server_is_retried_as_chat_requests_are(asr: Any, retries: int) -> None:
    with ScriptedAsrServer(PHRASES, refuse_first=2) as server:
        a = asr(server, max_retries=retries)
        fd = a.create()
        assert a.connect(fd) == 0
        events = a.wait(fd, -1, abi.EPOLLIN | abi.EPOLLERR)
        assert server.refused == (2 if retries else 1)
        if retries:
            assert events == abi.EPOLLIN and a.status(fd)["state"] == "Connected"
        else:
            assert events & abi.EPOLLERR and "HTTP 503" in a.status(fd)["last_error"]


def test_a_clean_close_is_hup_once_the_queue_is_read(asr: Any) -> None:
    with ScriptedAsrServer(PHRASES, ms_per_phrase=20, fault="close",
                           fault_after_bytes=1920) as server:
        a = asr(server)
        fd = a.create()
        assert a.connect(fd) == 0
        assert a.write(fd, tone(20)) == 960  # one phrase
        assert a.write(fd, tone(20)) == 960  # the server closes here, untranscribed
        wait_for(lambda: a.status(fd)["state"] == "Draining")
        types = []
        while True:
            events = a.wait(fd, -1, abi.EPOLLIN | abi.EPOLLHUP)
            if not events & abi.EPOLLIN:
                break
            assert not events & abi.EPOLLHUP  # HUP waits for the queue to be read
            types.append(json.loads(a.read(fd)[1])["type"])
        assert events & abi.EPOLLHUP and not events & abi.EPOLLERR
        assert types[-1] == COMPLETED and a.status(fd)["last_error"] is None


def test_a_flood_of_events_is_bounded(asr: Any) -> None:
    with ScriptedAsrServer(PHRASES, fault="flood", fault_after_bytes=1,
                           flood_events=5000) as server:
        a = asr(server)
        fd = a.create()
        assert a.set(fd, "max_recv_queue_bytes", 4096) == 0
        assert a.connect(fd) == 0
        assert a.write(fd, tone(20)) == 960
        wait_for(lambda: a.status(fd)["events_received"] >= 5002)
        status = a.status(fd)
        assert status["recv_queue_bytes"] <= 4096
        assert status["dropped_events"] >= 5002 - 4096 // 60  # a flood event is > 60 bytes
        last = b""
        while (got := a.read(fd))[0] > 0:
            last = got[1]
        assert json.loads(last)["delta"] == "flood4999"  # the oldest went, the newest stayed
        assert a.write(fd, tone(20)) == 960  # the fd still works


def test_garbage_from_the_server_reaches_the_guest_as_it_came(asr: Any) -> None:
    with ScriptedAsrServer(PHRASES, fault="garbage", fault_after_bytes=1) as server:
        a = asr(server)
        fd = a.create()
        assert a.connect(fd) == 0
        assert a.write(fd, tone(20)) == 960
        events = [a.next_event(fd) for _ in range(4)]
        assert events[2:] == [b"}{ this is not JSON", b"\x00\xff\xfe binary"]
        assert a.write(fd, tone(500)) == 24000
        assert a.events_until(fd, COMPLETED)[-1]["transcript"] == PHRASES[0]


def test_a_wrong_key_is_a_clear_error_and_never_shows(asr: Any, capfd: Any) -> None:
    with ScriptedAsrServer(PHRASES, api_key="the-right-key-0123456789") as server:
        seen: list[Event] = []
        a = asr(server, RunOptions(capture_output=True, sinks=[seen.append]))
        fd = a.create()
        assert a.connect(fd) == 0
        assert a.wait(fd, -1, abi.EPOLLERR) & abi.EPOLLERR
        status = a.status(fd)
        assert "refused the handshake with HTTP 401" in status["last_error"]
        out = capfd.readouterr()
        everything = json.dumps(status) + out.out + out.err + repr(seen)
        assert KEY not in everything


def test_no_key_is_sent_without_one_and_refused_clearly(asr: Any,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(KEY_ENV)
    with ScriptedAsrServer(PHRASES, api_key="the-right-key-0123456789") as server:
        a = asr(server)
        fd = a.create()
        assert a.connect(fd) == 0
        assert a.wait(fd, -1, abi.EPOLLERR) & abi.EPOLLERR
        assert "HTTP 401" in a.status(fd)["last_error"]
        assert server.sessions == []  # refused at the handshake


def test_the_key_is_scrubbed_from_what_the_server_says(asr: Any) -> None:
    with ScriptedAsrServer(PHRASES, fault="echo_auth", fault_after_bytes=1) as server:
        a = asr(server)
        fd = a.create()
        assert a.connect(fd) == 0
        assert a.write(fd, tone(20)) == 960
        error = a.events_until(fd, "error")[-1]
        assert KEY not in json.dumps(error)
        assert error["error"]["message"] == "rejected credentials Bearer [redacted]"


def test_the_audio_budget_refuses_writes_past_it(asr: Any, server: ScriptedAsrServer) -> None:
    seen: list[Event] = []
    a = asr(server, RunOptions(capture_output=True, sinks=[seen.append]), max_audio_bytes=3000)
    fd = a.create()
    assert a.write(fd, tone(40)) == 1920
    assert a.write(fd, tone(40)) == EDQUOT
    assert a.write(fd, tone(20)) == 960  # what still fits goes on
    assert "max_audio_bytes" in a.status(fd)["last_error"]
    hits = [e for e in seen if e.kind == LIMIT_HIT]
    assert len(hits) == 1 and hits[0].data["limit"] == "max_audio_bytes"


def test_the_stub_transport_gives_spears_fake_text(asr: Any) -> None:
    a = asr()
    fd = a.create()
    for key, value in (("stub_event_interval_ms", 1), ("stub_emit_completed_every", 2),
                       ("stub_event_payload_bytes", 100)):
        assert a.set(fd, key, value) == 0
    assert a.ctl(fd, 2) == 0  # no transport: SPEAR's stub
    first, second = json.loads(a.next_event(fd)), json.loads(a.next_event(fd))
    assert (first["type"], first["text"]) == ("transcription.delta", "a" * 20)
    assert (second["type"], second["seq"]) == ("transcription.completed", 2)


def test_close_and_the_runs_end_stop_the_connection(asr: Any, make_host: Any,
                                                     server: ScriptedAsrServer) -> None:
    a = asr(server)
    fd = a.create()
    assert a.connect(fd) == 0
    assert a.wait(fd, -1) & abi.EPOLLIN
    threads = rtasr_threads()
    assert threads
    assert int(a.call("p_rtasr_close", fd)) == 0
    for thread in threads:
        thread.join(HANG_GUARD_S)
        assert not thread.is_alive()
    assert int(a.call("p_rtasr_close", fd)) == 0  # closed twice: 0, as any fd


def test_a_run_connects_a_bounded_number_of_fds(asr: Any, server: ScriptedAsrServer) -> None:
    from spearpy.hostcalls.rtasr import MAX_CONNECTIONS_PER_RUN

    a = asr(server)
    fds = [a.create() for _ in range(MAX_CONNECTIONS_PER_RUN + 1)]
    assert [a.connect(fd) for fd in fds] == [0] * MAX_CONNECTIONS_PER_RUN + [abi.EMFILE]
    assert int(a.call("p_rtasr_close", fds[0])) == 0
    assert a.ctl(fds[-1], 2) == 0  # a closed one makes room


@pytest.mark.parametrize("how", ["cancel", "timeout"])
def test_cancel_and_deadline_end_an_infinite_epoll_wait(make_host: Any, how: str,
                                                         server: ScriptedAsrServer) -> None:
    host = make_host(base_url="http://127.0.0.1:9/v1", rtasr_url=server.url)
    cancel = threading.Event()

    def on_event(event: Event) -> None:
        if event.kind == RUN_START and how == "cancel":
            threading.Timer(0.5, cancel.set).start()

    result = host.run(wat_module("rtasr_probe.wat"), cancel=cancel, on_event=on_event,
                      limits={"timeout": 1.0 if how == "timeout" else HANG_GUARD_S})
    assert result.outcome is (Outcome.CANCELLED if how == "cancel" else Outcome.TIMEOUT)
    assert server.sessions and server.wait_ended()  # the run's end closed the connection


# ---- end to end: SPEAR's mic_rtasr sample under `spearpy run` ---------------------------

espeak = needs_espeak


@pytest.fixture(scope="module")
def speech(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # Longer than the mic tests' sentence: several scripted transcripts fit in it.
    return make_speech(tmp_path_factory.mktemp("speech") / "speech.wav",
                       "hello from spear. this is a realtime transcription test.")


def seconds_of(path: Path) -> float:
    with wave.open(str(path)) as w:
        return float(w.getnframes() / w.getframerate())


def run_sample(*host_args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"}
    cmd = [sys.executable, "-m", "spearpy", "run", "--quiet", "--no-cache", *host_args,
           str(GUEST)]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=HANG_GUARD_S,
                          check=False, env=env)


@espeak
def test_the_sample_prints_transcripts_of_real_speech(speech: Path,
                                                      server: ScriptedAsrServer) -> None:
    proc = run_sample("--mic-file", str(speech), "--mic-pace", "realtime",
                      "--rtasr-url", server.url)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[:3] == ["mic_rtasr started", "event_type=session.created",
                         "event_type=session.updated"]
    assert lines[-1] == "mic hup"
    # At the audio's pace, each phrase's events are back long before the mic
    # ends; the last 1.5 s's may not be (the guest stops at the mic's HUP).
    sure = int((seconds_of(speech) - 1.5) / 0.5)
    assert sure >= 3
    expected = [line for phrase in PHRASES[:sure] for line in [*phrase.split(), phrase]]
    assert lines[3:3 + len(expected)] == expected
    assert server.wait_ended()
    # Every frame of the resampled file went up, and flush_on_close committed it.
    frames = round(seconds_of(speech) * 1000 / 20)
    assert abs(server.audio_bytes - frames * 960) <= 960
    assert server.sessions[0].commits == 1


@espeak
def test_the_sample_at_full_speed_ends_at_the_mics_hup(speech: Path,
                                                       server: ScriptedAsrServer) -> None:
    proc = run_sample("--mic-file", str(speech), "--mic-pace", "fast", "--rtasr-url", server.url)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("mic_rtasr started\n") and proc.stdout.endswith("mic hup\n")
    assert server.wait_ended()
    frames = round(seconds_of(speech) * 1000 / 20)
    assert abs(server.audio_bytes - frames * 960) <= 960
    assert server.sessions[0].commits == 1


@espeak
def test_the_sample_survives_a_backend_that_drops_mid_stream(speech: Path) -> None:
    with ScriptedAsrServer(PHRASES, fault="drop", fault_after_bytes=24000) as server:
        proc = run_sample("--mic-file", str(speech), "--rtasr-url", server.url)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[-1] == "rtasr err"


def test_a_bad_rtasr_url_is_refused_at_start() -> None:
    proc = run_sample("--rtasr-url", "https://api.openai.com/v1/realtime")
    assert proc.returncode != 0
    assert "invalid --rtasr-url" in proc.stderr and "ws:// or wss://" in proc.stderr


def test_the_scripted_server_runs_standalone() -> None:
    from websockets.sync.client import connect

    proc = subprocess.Popen([sys.executable, "-m", "spearpy.testing.asr", "standalone works",
                             "--ms-per-phrase", "20"], cwd=ROOT, stdout=subprocess.PIPE,
                            text=True)
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().strip()
        assert url.startswith("ws://127.0.0.1:") and url.endswith("?intent=transcription")
        with connect(url, open_timeout=HANG_GUARD_S) as ws:
            assert json.loads(ws.recv(HANG_GUARD_S))["type"] == "session.created"
            ws.send(json.dumps({"type": "input_audio_buffer.append",
                                "audio": base64.b64encode(tone(20)).decode()}))
            got = [json.loads(ws.recv(HANG_GUARD_S)) for _ in range(3)]
        assert [e.get("delta", e.get("transcript")) for e in got] == [
            "standalone", "works", "standalone works"]
    finally:
        proc.terminate()
        assert proc.wait(HANG_GUARD_S) == 0
