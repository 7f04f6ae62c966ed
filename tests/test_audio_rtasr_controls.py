"""The guest SDKs' rtasr controls end to end: Rust's `Rtasr::autoflush`,
`send_event`, `flush` and `clear` (guest/rust/samples/rtasr_controls.rs) and
C's `sp_rtasr_get_autoflush_alloc`, `sp_rtasr_send_event_json`,
`sp_rtasr_flush` and `sp_rtasr_clear` (guest/c/samples/rtasr_controls.c),
each run by `spearpy run` in a subprocess against a real WebSocket server
on 127.0.0.1 (spearpy.testing.ScriptedAsrServer), which transcribes one
phrase of its script per 500 ms of audio and whatever is left over at a
commit.

The sample sets autoflush "manual" and prints what get-autoflush reads back
(the setting as the host keeps it: what was set, the parts not set null).
Then it sends one event, then three 100 ms chunks of tone: the first
flushed, the second cleared (and flushed after the clear), the third
flushed. What the server took is checked on its side: the event as the
guest wrote it, three commits and one clear, every byte of audio; and the
effect: two utterances transcribed, not three, so the cleared chunk never
reached a transcript.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from spearpy.testing import ScriptedAsrServer
from tests.test_audio_rtasr import HANG_GUARD_S, PHRASES

ROOT = Path(__file__).resolve().parents[1]
GUESTS = ["c_rtasr_controls", "rust_rtasr_controls"]
CHUNK = 4800  # 100 ms of pcm16 at 24 kHz: less than a phrase's worth
ITEM = {"type": "conversation.item.create", "item": {
    "type": "message", "role": "user",
    "content": [{"type": "input_text", "text": "spear rtasr controls"}]}}
AUTOFLUSH = {"strategy": "manual", "flush_on_close": False}  # as the samples set it
# What get-autoflush answers after that set (the host's default is server_vad).
AUTOFLUSH_READ_BACK = {**AUTOFLUSH, "vad": None, "client_commit": None}


def words(phrase: str) -> list[str]:
    return [f"delta: {w}" for w in phrase.split()] + [f"transcript: {phrase}"]


EXPECTED = [
    "rtasr_controls started",
    "set transport: 0", "set autoflush: 0",
    "autoflush: " + json.dumps(AUTOFLUSH_READ_BACK, separators=(",", ":")),
    "connect: 0",
    "event: session.created", "event: session.updated",
    "send_event: 0",
    f"write: {CHUNK}", "flush: 0",
    "event: input_audio_buffer.committed", *words(PHRASES[0]),
    f"write: {CHUNK}", "clear: 0",
    "event: input_audio_buffer.cleared",
    "flush: 0",
    "event: input_audio_buffer.committed",  # the cleared chunk: nothing to transcribe
    f"write: {CHUNK}", "flush: 0",
    "event: input_audio_buffer.committed", *words(PHRASES[1]),
]


@pytest.fixture
def server() -> Iterator[ScriptedAsrServer]:
    with ScriptedAsrServer(PHRASES, ms_per_phrase=500) as s:
        yield s


def run_guest(name: str, url: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"}
    cmd = [sys.executable, "-m", "spearpy", "run", "--quiet", "--no-cache", "--rtasr-url", url,
           str(ROOT / "wasm-samples" / f"{name}.wasm")]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=HANG_GUARD_S,
                          check=False, env=env)


@pytest.mark.parametrize("name", GUESTS)
def test_send_event_flush_and_clear_reach_the_server_and_do_what_they_say(
        name: str, server: ScriptedAsrServer) -> None:
    proc = run_guest(name, server.url)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[:-1] == EXPECTED
    status = json.loads(lines[-1].removeprefix("status: "))
    assert server.wait_ended()
    [session] = server.sessions
    # Manual autoflush: no server VAD, so every commit is one of the guest's flushes.
    assert [u["session"]["turn_detection"] for u in session.updates] == [None]
    assert session.other_events == [ITEM]  # send_event: passed on as the guest wrote it
    assert (session.commits, session.clears) == (3, 1)
    assert session.audio_bytes == 3 * CHUNK == status["audio_bytes_written"]
    # Three chunks went up and three commits followed, yet only two phrases
    # were transcribed: the clear dropped the second chunk at the server.
    transcripts = [line for line in lines if line.startswith("transcript: ")]
    assert transcripts == [f"transcript: {p}" for p in PHRASES[:2]]
    assert status["state"] == "Connected" and status["last_error"] is None
    assert status["send_queue_bytes"] == 0 and status["dropped_events"] == 0


def test_the_rust_and_c_samples_print_the_same_lines() -> None:
    outputs = {}
    for name in GUESTS:
        with ScriptedAsrServer(PHRASES, ms_per_phrase=500) as one:
            proc = run_guest(name, one.url)
            assert proc.returncode == 0, proc.stdout + proc.stderr
            assert one.wait_ended()
        outputs[name] = proc.stdout
    assert outputs["rust_rtasr_controls"] == outputs["c_rtasr_controls"]


@pytest.mark.parametrize("name", GUESTS)
def test_a_server_that_drops_mid_way_is_err_and_exit_1(name: str) -> None:
    # The connection goes once the first chunk arrives: the flush's answer
    # never comes (ERR while waiting for it), or, if the host saw the drop
    # before the guest's flush, the flush is -EIO.
    with ScriptedAsrServer(PHRASES, fault="drop", fault_after_bytes=1) as server:
        proc = run_guest(name, server.url)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[-2] in ("rtasr err", "flush: -5"), lines
    assert "transcript: " not in proc.stdout
    status = json.loads(lines[-1].removeprefix("status: "))
    assert status["state"] == "Error" and status["last_error"], status
