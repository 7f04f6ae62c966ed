"""The microphone end to end (issue 20 part A): the c_mic_read guest and its
Rust twin rust_mic_read (spear_guest's Mic) under `spearpy run` and Host.run,
on espeak-ng speech, SPEAR's device request served by --mic-file, a client's
user stream, the audio budget, and cancel and deadline ending an infinite
wait."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest

from spearpy.audio.budget import EDQUOT
from spearpy.observe.events import LIMIT_HIT, RUN_START, Event
from spearpy.outcome import Outcome
from spearpy.streams import ssf
from spearpy.streams.hub import StreamHub
from tests.mic_support import GUESTS, HANG_GUARD_S, fnv, needs_espeak, run_guest, summary

pytestmark = needs_espeak


@pytest.fixture(params=GUESTS, ids=lambda p: p.stem)
def guest(request: pytest.FixtureRequest) -> Path:
    path: Path = request.param
    return path


def test_the_guest_reads_speech_to_hup_at_both_paces(speech: Path, guest: Path) -> None:
    params = json.dumps({"source": "file", "path": "/audio/speech.wav",
                         "sample_rate_hz": 24000, "frame_ms": 20, "max_queue_bytes": 4096})
    results = {}
    for pace in ("fast", "realtime"):
        proc = run_guest(params, host_args=("--mic-pace", pace, "--dir",
                                            f"{speech.parent}:/audio"), guest=guest)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        results[pace] = summary(proc.stdout)
    fast, realtime = results["fast"], results["realtime"]
    assert fast["end"] == "hup" and fast["frame_min"] == fast["frame_max"] == 960
    # Fast waits for room in a small queue and loses nothing: the same audio.
    assert fast["status"]["dropped_frames"] == 0
    assert (fast["frames"], fast["fnv"]) == (realtime["frames"], realtime["fnv"])


def test_mic_file_stands_in_for_the_device(speech: Path, guest: Path) -> None:
    """SPEAR's mic_rtasr asks for a device with to_stub false: --mic-file serves it."""
    params = json.dumps({"sample_rate_hz": 24000, "channels": 1, "format": "pcm16",
                         "frame_ms": 20, "source": "device", "fallback": {"to_stub": False}})
    proc = run_guest(params, host_args=("--mic-file", str(speech), "--mic-pace", "fast"),
                     guest=guest)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result = summary(proc.stdout)
    assert result["end"] == "hup" and result["frames"] > 100
    assert result["status"]["source"] == "file"


def test_a_client_stream_is_the_microphone(make_host: Any, guest: Path) -> None:
    host = make_host(base_url="http://127.0.0.1:9/v1")
    hub = StreamHub()
    pieces = [bytes((i * 7 + j) % 251 for j in range(n)) for i, n in enumerate((1, 333, 640, 97))]

    def client() -> None:
        session = hub.connect()
        for seq, piece in enumerate(pieces):
            # Each piece lands while the guest is blocked in spear_epoll_wait
            # (its mic found nothing to read), so the frame wakes the wait.
            assert hub.wait_guest_idle(HANG_GUARD_S)
            assert session.push_wait(ssf.build(7, seq, piece), timeout=HANG_GUARD_S)
        # Closed only once the guest took everything (a session's end drops
        # what its streams still hold).
        channel = next(c for c in hub.channels_of(session) if c.stream_id == 7)
        assert hub.wait_room(lambda: not len(channel.inbound), HANG_GUARD_S)
        session.close()

    sender = threading.Thread(target=client, daemon=True)
    sender.start()
    results: list[Any] = []
    # On a thread of its own: a guest deadlocked inside a hostcall would not
    # even reach its deadline, and must fail the test, not hang it.
    runner = threading.Thread(target=lambda: results.append(host.run(
        guest.read_bytes(), ["{\"source\":\"user_stream\",\"stream_id\":7,"
                             "\"sample_rate_hz\":16000,\"frame_ms\":20}"],
        streams=hub, limits={"timeout": HANG_GUARD_S / 2})), daemon=True)
    runner.start()
    runner.join(HANG_GUARD_S)
    sender.join(HANG_GUARD_S)
    assert results, "the run hung"
    result = results[0]
    assert result.exit_code == 0, result.stdout
    got = summary(result.stdout.decode())
    sent = b"".join(pieces)
    padded = sent + bytes(-len(sent) % 640)  # the tail is padded to a whole frame
    assert (got["end"], got["bytes"], got["frame_min"], got["frame_max"]) == \
        ("hup", len(padded), 640, 640)
    assert got["fnv"] == fnv(padded)


@pytest.mark.parametrize(("config", "limit", "frames"), [
    ({"max_audio_bytes": 6400}, "max_audio_bytes", 10),
    ({"max_audio_seconds": 0.1}, "max_audio_seconds", 5)])
def test_the_audio_budget_ends_reading(make_host: Any, config: dict[str, Any], limit: str,
                                       frames: int, guest: Path) -> None:
    host = make_host(base_url="http://127.0.0.1:9/v1", **config)
    events: list[Event] = []
    result = host.run(guest.read_bytes(), ["{\"source\":\"stub\",\"sample_rate_hz\":16000,"
                                           "\"frame_ms\":20}"], on_event=events.append,
                      limits={"timeout": HANG_GUARD_S})
    got = summary(result.stdout.decode())
    assert result.exit_code == 3 and got["end"] == f"read {EDQUOT}"
    assert got["frames"] == frames and got["bytes"] == frames * 640
    assert got["status"]["last_error"].startswith(f"audio limit reached: {limit}")
    hits = [e.data for e in events if e.kind == LIMIT_HIT]
    assert hits == [{"limit": limit, "value": config[limit]}]


@pytest.mark.parametrize("how", ["cancel", "timeout"])
def test_cancel_and_deadline_end_an_infinite_epoll_wait(make_host: Any, how: str,
                                                        guest: Path) -> None:
    """A user-stream mic whose client never comes: the guest waits forever."""
    host = make_host(base_url="http://127.0.0.1:9/v1")
    cancel = threading.Event()

    def on_event(event: Event) -> None:
        if event.kind == RUN_START and how == "cancel":
            threading.Timer(0.3, cancel.set).start()

    result = host.run(guest.read_bytes(), ["{\"source\":\"user_stream\",\"stream_id\":1}"],
                      streams=StreamHub(), cancel=cancel, on_event=on_event,
                      limits={"timeout": 0.5 if how == "timeout" else HANG_GUARD_S})
    assert result.outcome is (Outcome.CANCELLED if how == "cancel" else Outcome.TIMEOUT)
