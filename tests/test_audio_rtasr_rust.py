"""The Rust twin of c_mic_rtasr (guest/rust/samples/mic_rtasr.rs: the
spear_guest crate's Mic, Rtasr and Epoll) end to end, as
tests/test_audio_rtasr.py runs the C sample: espeak-ng speech through the
mic's --mic-file source, a real WebSocket server on 127.0.0.1
(spearpy.testing.ScriptedAsrServer), `spearpy run` in a subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from spearpy.testing import ScriptedAsrServer
from tests.mic_support import make_speech, needs_espeak
from tests.test_audio_rtasr import HANG_GUARD_S, PHRASES, seconds_of

ROOT = Path(__file__).resolve().parents[1]
GUEST = ROOT / "wasm-samples" / "rust_mic_rtasr.wasm"
C_GUEST = ROOT / "wasm-samples" / "c_mic_rtasr.wasm"

pytestmark = needs_espeak


@pytest.fixture(scope="module")
def speech(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_speech(tmp_path_factory.mktemp("speech") / "speech.wav",
                       "hello from spear. this is a realtime transcription test.")


@pytest.fixture
def server() -> Iterator[ScriptedAsrServer]:
    with ScriptedAsrServer(PHRASES, ms_per_phrase=500) as s:
        yield s


def run_sample(*host_args: str, guest: Path = GUEST,
               args: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"}
    cmd = [sys.executable, "-m", "spearpy", "run", "--quiet", "--no-cache", *host_args,
           str(guest), "--", *args]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=HANG_GUARD_S,
                          check=False, env=env)


def test_the_rust_sample_prints_transcripts_of_real_speech(speech: Path,
                                                           server: ScriptedAsrServer) -> None:
    proc = run_sample("--mic-file", str(speech), "--mic-pace", "realtime",
                      "--rtasr-url", server.url, args=("--status",))
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "mic_rtasr started"
    autoflush = json.loads(lines[1].removeprefix("autoflush: "))
    assert autoflush["strategy"] == "server_vad" and autoflush["vad"]["silence_ms"] == 600
    assert autoflush["flush_on_close"] is True
    assert lines[2:4] == ["event_type=session.created", "event_type=session.updated"]
    status = json.loads(lines[-1].removeprefix("status: "))
    assert lines[-2] == "mic hup"
    # At the audio's pace, each phrase's events are back long before the mic
    # ends; the last 1.5 s's may not be (the guest stops at the mic's HUP).
    sure = int((seconds_of(speech) - 1.5) / 0.5)
    assert sure >= 3
    expected = [line for phrase in PHRASES[:sure] for line in [*phrase.split(), phrase]]
    assert lines[4:4 + len(expected)] == expected
    assert server.wait_ended()
    # Every frame of the resampled file went up, and flush_on_close committed it.
    frames = round(seconds_of(speech) * 1000 / 20)
    assert abs(server.audio_bytes - frames * 960) <= 960
    assert status["audio_bytes_written"] == server.audio_bytes
    assert status["state"] == "Connected" and status["last_error"] is None
    assert server.sessions[0].commits == 1


def test_the_rust_and_c_samples_send_the_same_audio_at_full_speed(speech: Path) -> None:
    sent = {}
    for guest in (C_GUEST, GUEST):
        with ScriptedAsrServer(PHRASES, ms_per_phrase=500) as one:
            proc = run_sample("--mic-file", str(speech), "--mic-pace", "fast",
                              "--rtasr-url", one.url, guest=guest)
            assert proc.returncode == 0, proc.stderr
            assert proc.stdout.startswith("mic_rtasr started\n"), proc.stdout
            assert proc.stdout.endswith("mic hup\n"), proc.stdout
            assert one.wait_ended()
            sent[guest.stem] = (one.audio_bytes, one.sessions[0].commits)
    frames = round(seconds_of(speech) * 1000 / 20)
    assert abs(sent["rust_mic_rtasr"][0] - frames * 960) <= 960
    assert sent["rust_mic_rtasr"] == sent["c_mic_rtasr"]


def test_the_rust_sample_survives_a_backend_that_drops_mid_stream(speech: Path) -> None:
    with ScriptedAsrServer(PHRASES, fault="drop", fault_after_bytes=24000) as server:
        proc = run_sample("--mic-file", str(speech), "--rtasr-url", server.url)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[-1] == "rtasr err"
