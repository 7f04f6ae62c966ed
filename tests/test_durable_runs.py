"""Durable runs in process: a run journaled live, then resumed from every
point a crash could leave its journal at, answers the guest exactly as the
journal says and asks the world only what the journal lacks.

A crash after step k leaves the journal's first k steps (each step is
appended whole, docs/durable.md): cutting an uninterrupted run's journal
there is that journal. The model, the MCP server and the Python tool count
what reaches them, so "no paid call repeated" is checked where it is paid.
"""

from __future__ import annotations

import contextlib
import json
import math
import re
import struct
import sys
import wave
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spearpy.durable import JournalSpec
from spearpy.errors import SpearpyError
from spearpy.host import Host
from spearpy.mcp.naming import spear_tool_name
from spearpy.outcome import RunResult
from spearpy.testing import ScriptedAsrServer, ScriptedServer
from spearpy.tools.python import PythonTools
from tests.probe import wat_module

# tmp_path_factory is session-wide; each example makes its own directory.
_FIXTURES = [HealthCheck.function_scoped_fixture]
SAMPLES = Path(__file__).resolve().parents[1] / "wasm-samples"
TALLY_SERVER = str(Path(__file__).parent / "mcp_servers" / "tally.py")
DURABLE = wat_module("durable.wat")
TALLY = spear_tool_name("tally", "tally")
# durable.wat's first send asks the Python tool, its second the MCP server.
SCRIPT = {
    "rules": [
        {"when": {"tool_messages": 0, "last_user_contains": "what time"},
         "reply": {"tool_calls": [{"name": "count", "arguments": {"n": 2}}]}},
        {"when": {"tool_messages": 0, "last_user_contains": "and now"},
         "reply": {"tool_calls": [{"name": TALLY, "arguments": {"text": "tick"}}]}},
    ],
    "default": {"content": "done: {{last_tool}}"},
    "models": ["m"],
}


@dataclass
class World:
    """What the run reaches, each counting what reached it."""

    host: Host
    server: ScriptedServer
    tally: Path
    python_calls: list[int]

    def counts(self) -> tuple[int, int, int]:
        tallied = self.tally.read_text().count("\n") if self.tally.exists() else 0
        return len(self.server.requests), len(self.python_calls), tallied


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    where = tmp_path_factory.mktemp("world")
    (where / "script.json").write_text(json.dumps(SCRIPT))
    calls: list[int] = []
    tools = PythonTools()

    def count(n: int) -> int:
        """Count one call."""
        calls.append(n)
        return n * 21

    tools.add(count, parameters={"type": "object", "properties": {"n": {"type": "integer"}},
                                 "required": ["n"]})
    tally = where / "tally.txt"
    record = {"server_id": "tally", "transport": "stdio", "allowed_tools": ["*"],
              "stdio": {"command": sys.executable, "args": [TALLY_SERVER, str(tally)]}}
    with ScriptedServer(str(where / "script.json")) as server, \
            Host(cache_dir=None, base_url=server.base_url, model="m", api_key_env="",
                 python_tools=tools, mcp_servers=[record],
                 task_params={"mcp.enabled": True, "mcp.default_server_ids": ["tally"]}) as host:
        yield World(host, server, tally, calls)


@dataclass(frozen=True)
class Journaled:
    result: RunResult
    lines: list[str]
    counts: tuple[int, int, int]  # what the uninterrupted run asked of the world


def _journal(world: World, module: str | bytes, path: Path) -> Journaled:
    before = world.counts()
    result = world.host.run(module, journal=JournalSpec(path))
    assert result.outcome == "exited", result.message
    after = world.counts()
    return Journaled(result, path.read_text().splitlines(),
                     tuple(a - b for a, b in zip(after, before, strict=True)))  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def durable_run(world: World, tmp_path_factory: pytest.TempPathFactory) -> Journaled:
    return _journal(world, DURABLE, tmp_path_factory.mktemp("j") / "full.jsonl")


@pytest.fixture(scope="module")
def tool_run(world: World, tmp_path_factory: pytest.TempPathFactory) -> Journaled:
    host = Host(cache_dir=None, backend=f"scripted:{SAMPLES / 'scripts' / 'multi_tool.json'}")
    path = tmp_path_factory.mktemp("j") / "tools.jsonl"
    result = host.run(str(SAMPLES / "c_multi_tool.wasm"), journal=JournalSpec(path))
    host.close()
    assert result.outcome == "exited", result.message
    return Journaled(result, path.read_text().splitlines(), (0, 0, 0))


def _kinds(lines: list[str]) -> list[str]:
    return [json.loads(line)["kind"] for line in lines]


def _asks(lines: list[str]) -> tuple[int, int, int]:
    """(completions, Python tool calls, MCP calls) a journal's steps answer."""
    steps = [json.loads(line) for line in lines]
    sources = [s["request"]["source"] for s in steps if s["kind"] == "tool.outcome"]
    return (sum(s["kind"] == "chat.completion" for s in steps),
            sources.count("python"), sources.count("mcp"))


def test_the_journal_holds_every_answer_from_the_world(durable_run: Journaled) -> None:
    kinds = _kinds(durable_run.lines)
    assert kinds[0] == "start" and kinds[-1] == "end"
    calls = [json.loads(line)["request"]["call"] for line in durable_run.lines
             if json.loads(line)["kind"] == "hostcall"]
    for call in ("system.time_now_ms", "system.random_i64", "system.wall_time_s",
                 "wasi.clock_time_get", "wasi.random_get", "system.sleep_ms", "host.clock"):
        assert call in calls, call
    assert _asks(durable_run.lines) == durable_run.counts == (2 + 2, 1, 1)


def test_a_replay_prints_the_same_and_asks_nothing(world: World, durable_run: Journaled,
                                                   tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    path.write_text("\n".join(durable_run.lines) + "\n")
    before = world.counts()
    replayed = world.host.run(DURABLE, journal=JournalSpec(path, mode="replay"))
    assert replayed.outcome == "exited", replayed.message
    assert replayed.stdout == durable_run.result.stdout
    assert world.counts() == before
    plain = world.host.run(DURABLE)
    assert plain.stdout != durable_run.result.stdout  # the clocks did move: replay is no accident


@settings(max_examples=12, deadline=None, suppress_health_check=_FIXTURES)
@given(data=st.data())
def test_a_run_cut_at_any_step_resumes_asking_only_what_the_journal_lacks(
        world: World, durable_run: Journaled, tmp_path_factory: pytest.TempPathFactory,
        data: st.DataObject) -> None:
    lines = durable_run.lines
    k = data.draw(st.integers(1, len(lines) - 2), label="steps kept after start")
    path = tmp_path_factory.mktemp("cut") / "cut.jsonl"
    path.write_text("\n".join(lines[:k + 1]) + "\n")
    before = world.counts()
    resumed = world.host.run(DURABLE, journal=JournalSpec(path))
    assert resumed.outcome == "exited", resumed.message
    asked = tuple(a - b for a, b in zip(world.counts(), before, strict=True))
    kept = _asks(lines[:k + 1])
    assert asked == tuple(t - j for t, j in zip(durable_run.counts, kept, strict=True))
    after = path.read_text().splitlines()
    assert after[:k + 1] == lines[:k + 1]  # the journaled steps stay as they were
    assert _kinds(after)[-1] == "end" and len(after) == len(lines)
    # What the guest printed from journaled answers is what the first run printed.
    replayed = world.host.run(DURABLE, journal=JournalSpec(path, mode="replay"))
    assert replayed.stdout == resumed.stdout
    first_block = 48  # durable.wat's first clocks and randomness
    if k >= 5:
        assert resumed.stdout[:first_block] == durable_run.result.stdout[:first_block]


@settings(max_examples=8, deadline=None, suppress_health_check=_FIXTURES)
@given(data=st.data())
def test_a_deterministic_guest_resumed_anywhere_ends_as_if_never_stopped(
        tool_run: Journaled, tmp_path_factory: pytest.TempPathFactory,
        data: st.DataObject) -> None:
    lines = tool_run.lines
    k = data.draw(st.integers(1, len(lines) - 2), label="steps kept after start")
    path = tmp_path_factory.mktemp("cut") / "cut.jsonl"
    path.write_text("\n".join(lines[:k + 1]) + "\n")
    host = Host(cache_dir=None, backend=f"scripted:{SAMPLES / 'scripts' / 'multi_tool.json'}")
    try:
        resumed = host.run(str(SAMPLES / "c_multi_tool.wasm"), journal=JournalSpec(path))
    finally:
        host.close()
    assert (resumed.outcome, resumed.exit_code) == ("exited", 0)
    assert resumed.stdout == tool_run.result.stdout
    assert _conversation(resumed) == _conversation(tool_run.result)


def _conversation(result: RunResult) -> list[tuple[str, str]]:
    """Each transcript message's role and text; tool-call ids are the model's
    own numbering (the scripted model counts its requests), so not compared."""
    out = []
    for transcript in result.transcripts:
        for message in transcript["messages"]:
            text = json.dumps(message.get("content")) + json.dumps(
                [c["function"] for c in message.get("tool_calls") or []])
            out.append((message["role"], re.sub(r"call_\d+_\d+|sp\d+", "ID", text)))
    return out


def test_a_run_that_is_not_the_journaled_one_stops_at_step_0(world: World,
                                                             durable_run: Journaled,
                                                             tmp_path: Path) -> None:
    path = tmp_path / "j.jsonl"
    path.write_text("\n".join(durable_run.lines[:3]) + "\n")
    other = world.host.run(wat_module("durable.wat", {"and now?": "and NOW?"}),
                           journal=JournalSpec(path))
    assert other.outcome == "replay_mismatch" and other.exit_code == 138
    assert "step 0 (start) diverges at module_sha256" in other.message
    host = Host(cache_dir=None, base_url=world.server.base_url, model="other",
                api_key_env="")
    try:
        flagged = host.run(DURABLE, journal=JournalSpec(path))
    finally:
        host.close()
    assert flagged.outcome == "replay_mismatch"
    assert "step 0 (start) diverges at flags.host.model" in flagged.message


def test_host_resume_starts_the_journaled_run_again_from_its_journal(
        world: World, durable_run: Journaled, tmp_path: Path) -> None:
    path = tmp_path / "cut.jsonl"
    path.write_text("\n".join(durable_run.lines[:8]) + "\n")  # after the first send
    before = world.counts()
    with pytest.raises(SpearpyError, match="names no module file"):
        world.host.resume(JournalSpec(path))  # its run was given bytes
    resumed = world.host.resume(JournalSpec(path), module=DURABLE)
    assert resumed.outcome == "exited", resumed.message
    asked = tuple(a - b for a, b in zip(world.counts(), before, strict=True))
    assert asked == tuple(t - j for t, j in zip(durable_run.counts,
                                                _asks(durable_run.lines[:8]), strict=True))


# ---- the microphone and realtime ASR (user streams: test_durable_streams_audio.py) ----

MIC_GUEST = str(SAMPLES / "c_mic_read.wasm")
RTASR_GUEST = str(SAMPLES / "c_mic_rtasr.wasm")
# The mic reads a mounted WAV as fast as the guest takes it: a queue of a
# few frames makes the pump wait for room, so no frame is ever dropped and
# what the guest prints depends on the audio only, not on timing.
MIC_PARAMS = json.dumps({"source": "file", "path": "/audio/tone.wav", "sample_rate_hz": 16000,
                         "frame_ms": 20, "max_queue_bytes": 4096})
HANG_GUARD = {"timeout": 120}  # against a hung host only; nothing asserts on time


def _tone(path: Path, rate: int, hz: float, seconds: float) -> Path:
    """A mono PCM16 sine WAV: real audio a test can make without espeak-ng."""
    frames = int(rate * seconds)
    with wave.open(str(path), "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(rate)
        out.writeframes(b"".join(struct.pack("<h", int(8000 * math.sin(2 * math.pi * hz * i
                                                                         / rate)))
                                 for i in range(frames)))
    return path


@dataclass
class MicWorld:
    host: Host
    audio: Path  # mounted at /audio

    @property
    def wav(self) -> Path:
        return self.audio / "tone.wav"

    def run(self, journal: JournalSpec | None = None) -> RunResult:
        return self.host.run(MIC_GUEST, [MIC_PARAMS], dirs=[(str(self.audio), "/audio")],
                             journal=journal, limits=HANG_GUARD)


@pytest.fixture(scope="module")
def mic_world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MicWorld]:
    audio = tmp_path_factory.mktemp("audio")
    _tone(audio / "tone.wav", 16000, 440.0, 0.5)  # 25 frames of 20 ms
    with Host(cache_dir=None, base_url="http://127.0.0.1:9/v1", api_key_env="",
              mic_pace="fast") as host:
        yield MicWorld(host, audio)


@pytest.fixture(scope="module")
def mic_run(mic_world: MicWorld, tmp_path_factory: pytest.TempPathFactory) -> Journaled:
    path = tmp_path_factory.mktemp("j") / "mic.jsonl"
    result = mic_world.run(JournalSpec(path))
    assert (result.outcome, result.exit_code) == ("exited", 0), result.stdout
    out = result.stdout or b""
    assert b"frames 25 bytes 16000 " in out and b"end: hup" in out
    return Journaled(result, path.read_text().splitlines(), (0, 0, 0))


def _calls(lines: list[str]) -> list[str]:
    return [json.loads(line)["request"]["call"] for line in lines
            if json.loads(line)["kind"] == "hostcall"]


@contextlib.contextmanager
def _gone(path: Path) -> Iterator[None]:
    """The file is not there for the block: whatever opens it fails."""
    data = path.read_bytes()
    path.unlink()
    try:
        yield
    finally:
        path.write_bytes(data)


def test_a_mic_replay_opens_no_source_and_prints_the_same(mic_world: MicWorld,
                                                          mic_run: Journaled,
                                                          tmp_path: Path) -> None:
    calls = _calls(mic_run.lines)
    assert calls.count("mic.mic_read") >= 25 and "mic.mic_ctl" in calls
    path = tmp_path / "r.jsonl"
    path.write_text("\n".join(mic_run.lines) + "\n")
    with _gone(mic_world.wav):
        # Every frame comes from the journal: the WAV it was read from is gone.
        replayed = mic_world.run(JournalSpec(path, mode="replay"))
        plain = mic_world.run()
    assert (replayed.outcome, replayed.exit_code) == ("exited", 0), replayed.message
    assert replayed.stdout == mic_run.result.stdout
    # Without the journal the same run cannot open its source: replay is no accident.
    assert plain.exit_code == 1 and plain.stdout != mic_run.result.stdout


def _cut_anywhere(lines: list[str], tmp_path_factory: pytest.TempPathFactory,
                  data: st.DataObject) -> tuple[int, Path]:
    """A journal as a crash after a hypothesis-chosen step k leaves it: (k, its path)."""
    k = data.draw(st.integers(1, len(lines) - 2), label="steps kept after start")
    path = tmp_path_factory.mktemp("cut") / "cut.jsonl"
    path.write_text("\n".join(lines[:k + 1]) + "\n")
    return k, path


@settings(max_examples=12, deadline=None, suppress_health_check=_FIXTURES)
@given(data=st.data())
def test_a_mic_run_cut_at_any_step_resumes_and_ends_as_if_never_stopped(
        mic_world: MicWorld, mic_run: Journaled, tmp_path_factory: pytest.TempPathFactory,
        data: st.DataObject) -> None:
    """A mic's source is set up by mic_ctl, whose answer a replay serves
    without opening the source: going live, the resume opens it again and
    skips the frames the journal delivered (docs/durable.md), so the guest
    reads every frame of the file once, wherever the cut fell."""
    lines = mic_run.lines
    k, path = _cut_anywhere(lines, tmp_path_factory, data)
    resumed = mic_world.run(JournalSpec(path))
    assert (resumed.outcome, resumed.exit_code) == ("exited", 0), resumed.message
    assert resumed.stdout == mic_run.result.stdout  # frames 25, the same fnv: none twice
    after = path.read_text().splitlines()
    assert after[:k + 1] == lines[:k + 1] and _kinds(after)[-1] == "end"


@dataclass
class RtasrWorld:
    host: Host
    asr: ScriptedAsrServer
    wav: Path
    key: str


@pytest.fixture
def rtasr_world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[RtasrWorld]:
    key = "sk-durable-rtasr-0123456789"
    monkeypatch.setenv("SPEARPY_TEST_RTASR_KEY", key)
    wav = _tone(tmp_path / "tone.wav", 24000, 440.0, 1.0)
    with ScriptedAsrServer(["one two", "three four"], ms_per_phrase=200, api_key=key) as asr, \
            Host(cache_dir=None, base_url="http://127.0.0.1:9/v1", api_key_env="",
                 mic_file=wav, mic_pace="fast", rtasr_url=asr.url,
                 rtasr_api_key_env="SPEARPY_TEST_RTASR_KEY") as host:
        yield RtasrWorld(host, asr, wav, key)


def _rtasr_journaled(world: RtasrWorld, path: Path) -> RunResult:
    live = world.host.run(RTASR_GUEST, journal=JournalSpec(path), limits=HANG_GUARD)
    assert (live.outcome, live.exit_code) == ("exited", 0), live.stdout
    assert len(world.asr.sessions) == 1
    return live


def test_a_replayed_rtasr_run_makes_no_connection(rtasr_world: RtasrWorld,
                                                  tmp_path: Path) -> None:
    path = tmp_path / "rtasr.jsonl"
    live = _rtasr_journaled(rtasr_world, path)
    # Which transcripts arrive before the mic's end is timing; the replay
    # must print whatever this run printed.
    journal = path.read_text()
    assert "rtasr.rtasr_write" in journal and rtasr_world.key not in journal
    with _gone(rtasr_world.wav):
        replayed = rtasr_world.host.run(RTASR_GUEST, journal=JournalSpec(path, mode="replay"),
                                        limits=HANG_GUARD)
    assert (replayed.outcome, replayed.exit_code) == ("exited", 0), replayed.message
    assert replayed.stdout == live.stdout
    assert len(rtasr_world.asr.sessions) == 1  # the replay connected to nobody


def test_an_rtasr_run_cut_mid_stream_reconnects_and_goes_on(rtasr_world: RtasrWorld,
                                                             tmp_path: Path) -> None:
    """Cut after rtasr_ctl(connect) and mic_ctl(set-param), both answered from
    the journal on replay: going live, the resume connects again with the
    journaled params (one new session, the same session.update) and the mic
    plays on from the frame the journal stopped at."""
    path = tmp_path / "rtasr.jsonl"
    _rtasr_journaled(rtasr_world, path)
    lines = path.read_text().splitlines()
    # Mid-stream: after half of the file's 50 frames reached the guest, so the
    # resume has audio left to send (a cut after the mic's end, where polls of
    # rtasr_read fill the journal, left a connection the guest closed before
    # its params went out).
    reads = [i for i, line in enumerate(lines) if '"call":"mic.mic_read"' in line
             and '"rc":960,' in line]
    cut = reads[len(reads) // 2] + 1
    path.write_text("\n".join(lines[:cut]) + "\n")
    assert "rtasr.rtasr_ctl" in _calls(lines[:cut]) and "mic.mic_read" in _calls(lines[:cut])
    first = rtasr_world.asr.sessions[0]
    resumed = rtasr_world.host.run(RTASR_GUEST, journal=JournalSpec(path), limits=HANG_GUARD)
    assert (resumed.outcome, resumed.exit_code) == ("exited", 0), resumed.message
    assert b"mic hup" in (resumed.stdout or b"")
    after = path.read_text().splitlines()
    assert after[:cut] == lines[:cut] and _kinds(after)[-1] == "end"
    assert len(rtasr_world.asr.sessions) == 2  # one new connection, made at go-live
    # The server reads a connection's last messages after the run may have ended.
    assert rtasr_world.asr.wait_ended(60.0)
    again = rtasr_world.asr.sessions[1]
    assert again.updates == first.updates  # its params and segmentation, rebuilt
    # Every 20 ms frame of the 1 s file reached the guest once: the journaled
    # ones, then the rest from the source opened again.
    frames = [json.loads(line) for line in after if json.loads(line)["kind"] == "hostcall"
              and json.loads(line)["request"]["call"] == "mic.mic_read"]
    assert sum(f["answer"]["rc"] == 960 for f in frames) == 50

