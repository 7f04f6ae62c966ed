"""Durable runs of guests that talk to a client over user streams or read a
microphone (issue 31's property test, its user-stream and mic guests): cut
the journal where hypothesis says, resume, and the run ends as if it had
never stopped, every completion asked once (docs/durable.md).

A cut journal is what a crash leaves: the steps before the cut, durable;
nothing after. Nothing was in flight at the cut, so the resume asks exactly
what the journal lacks. The client of a resumed run is the one that
reconnects after the crash: it sends what the guest had not read (frames a
client sent that the guest had not read are lost with the process) and
waits for the answers it had not received.
"""

from __future__ import annotations

import base64
import json
import math
import os
import re
import shutil
import signal
import struct
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spearpy.durable import JournalSpec
from spearpy.embed import RunHandle
from spearpy.host import Host
from spearpy.outcome import RunResult
from spearpy.streams import ssf
from spearpy.streams.hub import StreamHub, StreamsUnavailable
from spearpy.testing import ScriptedAsrServer, ScriptedServer
from tests.probe import wat_module
from tests.test_serve_durability import processes, start_service

services = processes  # the service processes a test starts, killed at its end

_FIXTURES = [HealthCheck.function_scoped_fixture]
SAMPLES = Path(__file__).resolve().parents[1] / "wasm-samples"
CHAT = str(SAMPLES / "c_stream_chat.wasm")
MIC = str(SAMPLES / "c_mic_read.wasm")
HANG_GUARD = {"timeout": 120}  # against a hung host only; nothing asserts on time
WAIT_S = 60.0

SUM_ANSWER = "7 + 35 = 42"
HELP_ANSWER = "Ask me to add two numbers, like: what is 7 + 35?"
# Each question and the answer the script gives it (a sum asks the add tool
# first: two completions; anything else one).
QUESTIONS = [("what is 7 + 35?", SUM_ANSWER), ("hello there", HELP_ANSWER),
             ("and 7 + 35 once more?", SUM_ANSWER)]
SCRIPT = {
    "rules": [
        {"when": {"last_role": "user", "last_user_contains": "+",
                  "tool_names_include": ["add"]},
         "reply": {"tool_calls": [{"name": "add", "arguments": {"a": 7, "b": 35}}]}},
        {"when": {"last_role": "tool"}, "reply": {"content": "7 + 35 = {{last_tool}}"}},
    ],
    "default": {"content": HELP_ANSWER},
    "models": ["m"],
}


@dataclass
class ChatWorld:
    host: Host
    server: ScriptedServer


@pytest.fixture(scope="module")
def chat_world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ChatWorld]:
    where = tmp_path_factory.mktemp("chat")
    (where / "script.json").write_text(json.dumps(SCRIPT))
    with ScriptedServer(str(where / "script.json")) as server, \
            Host(cache_dir=None, base_url=server.base_url, model="m", api_key_env="") as host:
        yield ChatWorld(host, server)


def _converse(handle: RunHandle, questions: list[str], finals: int) -> RunResult:
    """The client: send `questions` on stream 1, take frames until `finals`
    answers have ended, close the session; the run's result."""
    try:
        stream = handle.open_stream(1)
    except StreamsUnavailable:  # the run ended from its journal alone
        return handle.result(timeout=WAIT_S)
    for question in questions:
        stream.send(question.encode(), timeout=WAIT_S)
    seen = 0
    while seen < finals:
        frame = stream.recv(timeout=WAIT_S)
        assert frame is not None, f"{seen} of {finals} answers came"
        seen += frame.meta_json() == {"final": True}
    handle.close_streams()
    return handle.result(timeout=WAIT_S)


@dataclass(frozen=True)
class Journaled:
    result: RunResult
    lines: list[str]
    asked: int  # completions the uninterrupted run asked


@pytest.fixture(scope="module")
def chat_run(chat_world: ChatWorld, tmp_path_factory: pytest.TempPathFactory) -> Journaled:
    path = tmp_path_factory.mktemp("j") / "chat.jsonl"
    before = len(chat_world.server.requests)
    handle = chat_world.host.start(CHAT, ["--summary"], streams=True,
                                   journal=JournalSpec(path), limits=HANG_GUARD)
    result = _converse(handle, [q for q, _a in QUESTIONS], len(QUESTIONS))
    assert (result.outcome, result.exit_code) == ("exited", 0), result.message
    assert result.stdout == b"session closed: 3 questions answered\n"
    asked = len(chat_world.server.requests) - before
    assert asked == 5
    return Journaled(result, path.read_text().splitlines(), asked)


def _steps(lines: list[str]) -> list[dict[str, object]]:
    return [json.loads(line) for line in lines]


def _hostcalls(lines: list[str], call: str) -> list[int]:
    """The rc of each journaled `call`."""
    return [s["answer"]["rc"] for s in _steps(lines)  # type: ignore[index]
            if s["kind"] == "hostcall" and s["request"]["call"] == call]  # type: ignore[index]


def _answers_sent(lines: list[str]) -> int:
    """Answers whose every word frame the guest wrote before the cut."""
    written = sum(rc == 0 for rc in _hostcalls(lines, "user_streams.user_stream_write"))
    done = 0
    for _q, answer in QUESTIONS:
        words = len(answer.split(" "))
        if written < words:
            break
        written -= words
        done += 1
    return done


def _conversation(result: RunResult) -> list[tuple[str, str]]:
    """Each transcript message's role and text, tool-call ids left out (the
    scripted model numbers them by its request count)."""
    out = []
    for transcript in result.transcripts:
        for message in transcript["messages"]:
            text = json.dumps(message.get("content")) + json.dumps(
                [c["function"] for c in message.get("tool_calls") or []])
            out.append((message["role"], re.sub(r"call_\d+_\d+|sp\d+", "ID", text)))
    return out


def _cut(lines: list[str], k: int, where: Path) -> Path:
    path = where / "cut.jsonl"
    path.write_text("\n".join(lines[:k + 1]) + "\n")
    return path


@settings(max_examples=12, deadline=None, suppress_health_check=_FIXTURES)
@given(data=st.data())
def test_a_user_stream_chat_cut_anywhere_resumes_as_if_never_stopped(
        chat_world: ChatWorld, chat_run: Journaled, tmp_path_factory: pytest.TempPathFactory,
        data: st.DataObject) -> None:
    lines = chat_run.lines
    k = data.draw(st.integers(1, len(lines) - 2), label="steps kept after start")
    path = _cut(lines, k, tmp_path_factory.mktemp("cut"))
    kept = lines[:k + 1]
    read = sum(rc >= 0 for rc in _hostcalls(kept, "user_streams.user_stream_read"))
    before = len(chat_world.server.requests)
    handle = chat_world.host.start(CHAT, ["--summary"], streams=True,
                                   journal=JournalSpec(path), limits=HANG_GUARD)
    # The client reconnects once the resumed run waits for it: what the
    # guest wrote meanwhile (the rest of an answer cut short) waits for it.
    assert handle.streams is not None and handle.streams.wait_guest_idle(WAIT_S)
    resumed = _converse(handle, [q for q, _a in QUESTIONS[read:]],
                        len(QUESTIONS) - _answers_sent(kept))
    assert (resumed.outcome, resumed.exit_code) == ("exited", 0), resumed.message
    assert resumed.stdout == chat_run.result.stdout
    assert _conversation(resumed) == _conversation(chat_run.result)
    # Each completion once: the journal's answered, the rest asked now.
    journaled = sum(s["kind"] == "chat.completion" for s in _steps(kept))
    assert len(chat_world.server.requests) - before == chat_run.asked - journaled
    after = path.read_text().splitlines()
    assert after[:k + 1] == kept and _steps(after)[-1]["kind"] == "end"


def test_a_user_stream_run_replays_with_no_client(chat_world: ChatWorld, chat_run: Journaled,
                                                  tmp_path: Path) -> None:
    """No hub, no client, no model: the streams' fds are held by
    placeholders at their journaled numbers and every answer is the
    journal's."""
    path = tmp_path / "r.jsonl"
    path.write_text("\n".join(chat_run.lines) + "\n")
    before = len(chat_world.server.requests)
    replayed = chat_world.host.run(CHAT, ["--summary"], journal=JournalSpec(path, mode="replay"),
                                   limits=HANG_GUARD)
    assert (replayed.outcome, replayed.exit_code) == ("exited", 0), replayed.message
    assert replayed.stdout == chat_run.result.stdout
    assert _conversation(replayed) == _conversation(chat_run.result)
    assert len(chat_world.server.requests) == before


def test_a_stream_run_resumed_without_streams_says_it_cannot_go_live(
        chat_world: ChatWorld, chat_run: Journaled, tmp_path: Path) -> None:
    lines = chat_run.lines
    first_read = next(i for i, s in enumerate(_steps(lines)) if s["kind"] == "hostcall"
                      and s["request"]["call"] == "user_streams.user_stream_read")  # type: ignore[index]
    path = _cut(lines, first_read, tmp_path)
    resumed = chat_world.host.run(CHAT, ["--summary"], journal=JournalSpec(path),
                                  limits=HANG_GUARD)
    assert resumed.outcome == "replay_mismatch", resumed.message
    assert "cannot go on live" in resumed.message and "user_stream_open" in resumed.message
    assert "no user streams" in resumed.message
    assert _steps(path.read_text().splitlines())[-1]["kind"] != "end"  # resumable with streams
    handle = chat_world.host.start(CHAT, ["--summary"], streams=True, journal=JournalSpec(path),
                                   limits=HANG_GUARD)
    again = _converse(handle, [q for q, _a in QUESTIONS[1:]], len(QUESTIONS))
    assert again.stdout == chat_run.result.stdout


def test_a_stream_run_that_is_not_the_journaled_one_leaves_no_hub_bound(
        chat_world: ChatWorld, chat_run: Journaled, tmp_path: Path) -> None:
    path = tmp_path / "j.jsonl"
    path.write_text("\n".join(chat_run.lines[:3]) + "\n")
    hub = StreamHub()
    other = chat_world.host.run(CHAT, [], streams=hub, journal=JournalSpec(path))
    assert other.outcome == "replay_mismatch" and "step 0 (start)" in other.message
    with pytest.raises(StreamsUnavailable):  # its clients see the end, not a silent run
        hub.connect()


# ---- the microphone: a stub source, cut anywhere -----------------------------------


def _pcm(samples: int) -> bytes:
    """A PCM16 ramp-modulated tone: each 20 ms frame of it differs."""
    return b"".join(struct.pack("<h", int(6000 * math.sin(i / 7.0) * (1 + i % 50 / 50)))
                    for i in range(samples))


# 16 kHz, 20 ms frames: 320 samples a frame; the stub loops 3.5 frames of PCM,
# so where a resumed stub starts its loop shows in the frames' hash. A queue
# of 256 frames never fills in 40: nothing is dropped, whatever the timing.
STUB_PARAMS = json.dumps({"source": "stub", "sample_rate_hz": 16000, "frame_ms": 20,
                          "max_queue_bytes": 256 * 640,
                          "stub_pcm16_base64": base64.b64encode(_pcm(1120)).decode()})


@pytest.fixture(scope="module")
def mic_host() -> Iterator[Host]:
    with Host(cache_dir=None, base_url="http://127.0.0.1:9/v1", api_key_env="") as host:
        yield host


@pytest.fixture(scope="module")
def stub_run(mic_host: Host, tmp_path_factory: pytest.TempPathFactory) -> Journaled:
    path = tmp_path_factory.mktemp("j") / "stub.jsonl"
    result = mic_host.run(MIC, [STUB_PARAMS, "40"], journal=JournalSpec(path), limits=HANG_GUARD)
    assert (result.outcome, result.exit_code) == ("exited", 0), result.stdout
    assert b"frames 40 bytes 25600 " in (result.stdout or b"")
    return Journaled(result, path.read_text().splitlines(), 0)


@settings(max_examples=10, deadline=None, suppress_health_check=_FIXTURES)
@given(data=st.data())
def test_a_stub_mic_run_cut_anywhere_plays_on_where_it_stopped(
        mic_host: Host, stub_run: Journaled, tmp_path_factory: pytest.TempPathFactory,
        data: st.DataObject) -> None:
    lines = stub_run.lines
    k = data.draw(st.integers(1, len(lines) - 2), label="steps kept after start")
    path = _cut(lines, k, tmp_path_factory.mktemp("cut"))
    resumed = mic_host.run(MIC, [STUB_PARAMS, "40"], journal=JournalSpec(path),
                           limits=HANG_GUARD)
    assert (resumed.outcome, resumed.exit_code) == ("exited", 0), resumed.message
    # The same 40 frames, the same hash: the stub went on from the frame
    # after the journal's last, not from its loop's start.
    assert resumed.stdout == stub_run.result.stdout
    after = path.read_text().splitlines()
    assert after[:k + 1] == lines[:k + 1] and _steps(after)[-1]["kind"] == "end"



# ---- spearpy serve: a stream run survives a restart ----------------------------------


def _ask(url: str, question: str, seen: int) -> bytes:
    """One question over the run's WebSocket, its answer's words back; the
    session stays open while the answer comes (closing it ends the guest).
    Frames up to seq `seen` came before the crash: a write the journal had
    not made durable is made again by the resume, with the same seq, and a
    client drops what it has seen (docs/durable.md)."""
    import asyncio

    from tests.test_streams_ws import recv_frame, ws_connect

    async def talk() -> bytes:
        async with ws_connect(url) as ws:
            await ws.send(ssf.build(1, 1, question.encode()))
            frames: list[ssf.Frame] = []
            while not frames or frames[-1].meta_json() != {"final": True}:
                frame = await recv_frame(ws, WAIT_S)
                if frame.seq > seen:
                    frames.append(frame)
            return b"".join(f.data for f in frames)

    return asyncio.run(talk())


def _ws_url(client: httpx.Client, run_id: str) -> str:
    deadline = time.monotonic() + WAIT_S
    answer = client.post(f"/api/v1/executions/{run_id}/streams/session", json={})
    while answer.status_code == 503 and time.monotonic() < deadline:  # still resuming
        assert answer.json()["type"].endswith("run-resuming"), answer.text
        time.sleep(float(answer.headers["Retry-After"]) / 10)
        answer = client.post(f"/api/v1/executions/{run_id}/streams/session", json={})
    assert answer.status_code == 200, answer.text
    url: str = answer.json()["ws_url"]
    return url


def _until(client: httpx.Client, run_id: str, done: Callable[[dict[str, Any]], bool]
           ) -> dict[str, Any]:
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        view: dict[str, Any] = client.get(f"/v1/runs/{run_id}").json()
        if done(view):
            return view
        time.sleep(0.05)
    raise AssertionError(f"run {run_id}: {client.get(f'/v1/runs/{run_id}').json()}")


def test_a_killed_service_resumes_a_stream_run_and_its_client_reconnects(
        tmp_path: Path, chat_world: ChatWorld, services: list[subprocess.Popen[str]]) -> None:
    """A real `spearpy serve` is SIGKILLed between two questions of a
    stream_chat run; restarted on its state directory it resumes the run,
    whose streams a new session reaches: the second question is answered,
    the first is not asked of the model again."""
    mods = tmp_path / "modules"
    mods.mkdir()
    shutil.copy(CHAT, mods / "c_stream_chat.wasm")
    args = ["--modules", str(mods), "--state-dir", str(tmp_path / "state"),
            "--base-url", chat_world.server.base_url, "--model", "m", "--api-key-env", "",
            "--timeout", "120"]
    first, url = start_service(args)
    services.append(first)
    before = len(chat_world.server.requests)
    with httpx.Client(base_url=url, timeout=WAIT_S) as client:
        created = client.post("/v1/runs", json={"module": "c_stream_chat",
                                                "args": ["--summary"]})
        assert created.status_code == 201, created.text
        run_id = created.json()["id"]
        # The session's end would end the guest: the service dies with it open.
        import asyncio

        from tests.test_streams_ws import recv_frame, ws_connect

        async def first_question() -> list[ssf.Frame]:
            ws = await ws_connect(_ws_url(client, run_id))
            await ws.send(ssf.build(1, 1, QUESTIONS[0][0].encode()))
            frames = [await recv_frame(ws, WAIT_S)]
            while frames[-1].meta_json() != {"final": True}:
                frames.append(await recv_frame(ws, WAIT_S))
            first.send_signal(signal.SIGKILL)  # a crash, the client still attached
            first.wait(WAIT_S)
            return frames

        frames = asyncio.run(first_question())
        assert b"".join(f.data for f in frames) == (SUM_ANSWER + "\n").encode()
    assert len(chat_world.server.requests) - before == 2
    second, url = start_service(args)
    services.append(second)
    with httpx.Client(base_url=url, timeout=WAIT_S) as client:
        assert client.get(f"/v1/runs/{run_id}").json()["status"] == "resumed"
        answer = _ask(_ws_url(client, run_id), QUESTIONS[1][0], frames[-1].seq)
        assert answer == (HELP_ANSWER + "\n").encode()
        done = _until(client, run_id, lambda view: view["status"] == "finished")
    assert (done["outcome"], done["exit_code"]) == ("exited", 0), done
    assert "session closed: 2 questions answered" in done["stdout"]
    assert len(chat_world.server.requests) - before == 3  # the first question's two once


def test_a_device_mic_cut_mid_stream_is_refused_not_waited_on(mic_host: Host,
                                                                tmp_path: Path) -> None:
    """The `device` source (no --mic-file): a microphone cannot go back to
    where the journal stopped. On a machine without one the journaled run
    fell back to the stub, which its answers do not tell from a device: the
    resume refuses either way, names the fd, and leaves the journal
    unended (a replay still serves it)."""
    params = json.dumps({"source": "device", "sample_rate_hz": 16000, "frame_ms": 20})
    path = tmp_path / "device.jsonl"
    live = mic_host.run(MIC, [params, "5"], journal=JournalSpec(path), limits=HANG_GUARD)
    assert (live.outcome, live.exit_code) == ("exited", 0), live.stdout
    lines = path.read_text().splitlines()
    reads = [i for i, s in enumerate(_steps(lines)) if s["kind"] == "hostcall"
             and s["request"]["call"] == "mic.mic_read"]  # type: ignore[index]
    cut = _cut(lines, reads[1], tmp_path)
    resumed = mic_host.run(MIC, [params, "5"], journal=JournalSpec(cut), limits=HANG_GUARD)
    assert resumed.outcome == "replay_mismatch", resumed.message
    assert "cannot go on live" in resumed.message
    assert "live microphone cannot be resumed mid-stream" in resumed.message
    assert _steps(cut.read_text().splitlines())[-1]["kind"] != "end"
    replayed = mic_host.run(MIC, [params, "5"], journal=JournalSpec(path, mode="replay"),
                            limits=HANG_GUARD)
    assert replayed.stdout == live.stdout


def test_a_journal_whose_stream_open_names_another_fd_is_a_mismatch(
        chat_world: ChatWorld, chat_run: Journaled, tmp_path: Path) -> None:
    """A hand-edited (or foreign) journal whose ctl open answers an fd the
    table would not give: the replay stops naming it, no placeholder at a
    number the guest was never told."""
    steps = _steps(chat_run.lines)
    at = next(i for i, s in enumerate(steps) if s["kind"] == "hostcall"
              and s["request"]["call"] == "user_streams.user_stream_ctl_open")  # type: ignore[index]
    steps[at]["answer"]["rc"] = 4000  # type: ignore[index]
    path = tmp_path / "edited.jsonl"
    path.write_text("".join(json.dumps(s, separators=(",", ":")) + "\n" for s in steps))
    replayed = chat_world.host.run(CHAT, ["--summary"], journal=JournalSpec(path, mode="replay"),
                                   limits=HANG_GUARD)
    assert replayed.outcome == "replay_mismatch", replayed.message
    assert "user_stream_ctl_open opened fd 4000 in the journaled run" in replayed.message


# ---- realtime ASR: cut anywhere, reconnect at go-live --------------------------------

RTASR = str(SAMPLES / "c_mic_rtasr.wasm")
RTASR_KEY_ENV = "SPEARPY_TEST_DURABLE_RTASR_KEY"


@dataclass
class AsrWorld:
    host: Host
    asr: ScriptedAsrServer
    journaled: Journaled


@pytest.fixture(scope="module")
def asr_world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AsrWorld]:
    from tests.test_durable_runs import _tone

    key = "sk-durable-asr-property-0123456789"
    os.environ[RTASR_KEY_ENV] = key
    where = tmp_path_factory.mktemp("asr")
    wav = _tone(where / "tone.wav", 24000, 440.0, 1.0)  # 50 frames of 20 ms at 24 kHz
    try:
        with ScriptedAsrServer(["one two", "three four"], ms_per_phrase=200, api_key=key) as asr, \
                Host(cache_dir=None, base_url="http://127.0.0.1:9/v1", api_key_env="",
                     mic_file=wav, mic_pace="fast", rtasr_url=asr.url,
                     rtasr_api_key_env=RTASR_KEY_ENV) as host:
            path = where / "rtasr.jsonl"
            live = host.run(RTASR, journal=JournalSpec(path), limits=HANG_GUARD)
            assert (live.outcome, live.exit_code) == ("exited", 0), live.stdout
            assert len(asr.sessions) == 1
            yield AsrWorld(host, asr, Journaled(live, path.read_text().splitlines(), 0))
    finally:
        os.environ.pop(RTASR_KEY_ENV, None)


@settings(max_examples=8, deadline=None, suppress_health_check=_FIXTURES)
@given(data=st.data())
def test_an_rtasr_run_cut_anywhere_reconnects_and_sends_each_frame_once(
        asr_world: AsrWorld, tmp_path_factory: pytest.TempPathFactory,
        data: st.DataObject) -> None:
    """Which transcripts arrive before the mic's end is timing, so the
    resumed stdout is not compared whole; what is exact: the run ends as the
    first did (the mic's hup, exit 0), the guest reads each of the file's 50
    frames once, at most one new connection is made, with the journaled
    session params, and it is sent only audio written after the resume
    went live (what the journal holds was sent to the lost one)."""
    lines = asr_world.journaled.lines
    k = data.draw(st.integers(1, len(lines) - 2), label="steps kept after start")
    path = _cut(lines, k, tmp_path_factory.mktemp("cut"))
    assert asr_world.asr.wait_ended(WAIT_S)
    sessions = len(asr_world.asr.sessions)
    resumed = asr_world.host.run(RTASR, journal=JournalSpec(path), limits=HANG_GUARD)
    assert (resumed.outcome, resumed.exit_code) == ("exited", 0), resumed.message
    assert b"mic hup" in (resumed.stdout or b"")
    after = path.read_text().splitlines()
    assert after[:k + 1] == lines[:k + 1] and _steps(after)[-1]["kind"] == "end"
    assert sum(rc == 960 for rc in _hostcalls(after, "mic.mic_read")) == 50
    assert asr_world.asr.wait_ended(WAIT_S)
    # None when the guest was done (the mic's end, its close) before the
    # connection made at go-live was up, as the first run could have been.
    new = asr_world.asr.sessions[sessions:]
    assert len(new) <= 1
    live_written = sum(rc for rc in _hostcalls(after[k + 1:], "rtasr.rtasr_write") if rc > 0)
    if new:
        # A connection the guest closed as it came up (its mic done) may end
        # before its params are sent; one that carried audio had them first.
        if new[0].updates or new[0].audio_bytes:
            assert new[0].updates == asr_world.asr.sessions[0].updates
        assert new[0].audio_bytes <= live_written


# ---- the CLI: --stream-stdio with --journal ---------------------------------------------

ECHO = str(SAMPLES / "c_user_stream_echo.wasm")


def _spearpy(*args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    import sys

    return subprocess.run([sys.executable, "-m", "spearpy", *args], input=stdin,
                          capture_output=True, text=True, timeout=WAIT_S,
                          cwd=Path(__file__).resolve().parents[1], check=False)


def test_the_cli_journals_a_stdio_stream_run_and_resumes_it_with_one(tmp_path: Path) -> None:
    path = tmp_path / "echo.jsonl"
    run = _spearpy("run", "--journal", str(path), "--stream-stdio", ECHO, "--", "--summary",
                   stdin="hello\nworld\n")
    assert run.returncode == 0, run.stderr
    assert run.stdout == "hello\nworld\nsession closed: 2 frames echoed\n"
    lines = path.read_text().splitlines()
    replayed = _spearpy("replay", str(path))  # no client, no bridge
    assert replayed.returncode == 0 and replayed.stdout.endswith("2 frames echoed\n")
    # Cut after the first frame was echoed: the resume needs the second again.
    echoed = [i for i, s in enumerate(_steps(lines)) if s["kind"] == "hostcall"
              and s["request"]["call"] == "user_streams.user_stream_write"]  # type: ignore[index]
    cut = _cut(lines, echoed[0], tmp_path)
    refused = _spearpy("resume", str(cut))
    assert refused.returncode == 138 and "--stream-stdio" in refused.stderr, refused.stderr
    resumed = _spearpy("run", "--journal", str(cut), "--stream-stdio", ECHO, "--", "--summary",
                       stdin="world\n")
    assert resumed.returncode == 0, resumed.stderr
    # Only the frame sent again is echoed now; the guest counts both.
    assert resumed.stdout == "world\nsession closed: 2 frames echoed\n"


# ---- a guest that outlives its client's session ----------------------------------------

SESSIONS = wat_module("durable_sessions.wat")


def _until_true(done: Callable[[], bool], handle: RunHandle) -> None:
    deadline = time.monotonic() + WAIT_S
    while not done():
        assert time.monotonic() < deadline and not handle.done(), "the run went no further"
        time.sleep(0.01)


def _two_sessions(hub: StreamHub, handle: RunHandle) -> None:
    """The client of the journaled run: a session that sends `a` and ends
    once the guest has taken it, then a second that sends `b`."""
    first = hub.connect()
    first.push_wait(ssf.build(1, 1, b"a"), WAIT_S)
    _until_true(lambda: hub.inbound_pending() == 0, handle)
    first.close()
    hub.connect().push_wait(ssf.build(1, 1, b"b"), WAIT_S)


def test_a_session_that_ended_before_the_cut_stays_ended_on_resume(mic_host: Host,
                                                                    tmp_path: Path) -> None:
    """Cut after the guest was told its session ended: the stream fd it
    had (opened again from the journal) is that session's, closed, not
    handed to the client that connects to the resumed run; the guest's new
    open reaches that client."""
    path = tmp_path / "sessions.jsonl"
    hub = StreamHub()
    handle = mic_host.start(SESSIONS, streams=hub, journal=JournalSpec(path), limits=HANG_GUARD)
    _two_sessions(hub, handle)
    live = handle.result(timeout=WAIT_S)
    assert (live.outcome, live.exit_code) == ("exited", 0), live.message
    assert live.stdout == b"a" + struct.pack("<i", -32) + b"b"  # EPIPE on the ended stream
    lines = path.read_text().splitlines()
    steps = _steps(lines)
    told = max(i for i, s in enumerate(steps) if s["kind"] == "hostcall"
               and s["request"]["call"] == "user_streams.user_stream_ctl_read"  # type: ignore[index]
               and s["answer"]["rc"] == 8)  # type: ignore[index]
    cut = _cut(lines, told, tmp_path)
    again = StreamHub()
    opened: list[int | None] = []
    handle = mic_host.start(SESSIONS, streams=again, journal=JournalSpec(cut),
                            limits=HANG_GUARD, on_event=lambda event: opened.append(event.fd)
                            if event.kind == "stream_open" else None)
    # The client comes once the run is live: the guest's second open (the
    # first is the journal's, opened again) is made live, after the cut.
    _until_true(lambda: len(opened) >= 2, handle)
    again.connect().push_wait(ssf.build(1, 1, b"b"), WAIT_S)
    resumed = handle.result(timeout=WAIT_S)
    assert (resumed.outcome, resumed.exit_code) == ("exited", 0), resumed.message
    assert resumed.stdout == live.stdout


def test_a_mic_call_on_an_fd_that_is_no_mic_does_not_stop_the_resume(mic_host: Host,
                                                                      tmp_path: Path) -> None:
    """mic_ctl on the guest's epoll fd (EBADF) set nothing up: a resume cut
    after it goes live (it was refused: the fd was taken for one whose
    source a replay had not opened)."""
    wasm = wat_module("durable_wrong_fd.wat")
    path = tmp_path / "wrong.jsonl"
    live = mic_host.run(wasm, journal=JournalSpec(path), limits=HANG_GUARD)
    assert (live.outcome, live.exit_code) == ("exited", 0), live.message
    assert (live.stdout or b"")[:4] == struct.pack("<i", -9)  # EBADF
    lines = path.read_text().splitlines()
    assert _steps(lines)[1]["request"]["call"] == "mic.mic_ctl"  # type: ignore[index]
    cut = _cut(lines, 1, tmp_path)
    resumed = mic_host.run(wasm, journal=JournalSpec(cut), limits=HANG_GUARD)
    assert (resumed.outcome, resumed.exit_code) == ("exited", 0), resumed.message
    assert (resumed.stdout or b"")[:4] == struct.pack("<i", -9)
