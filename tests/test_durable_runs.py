"""Durable runs in process: a run journaled live, then resumed from every
point a crash could leave its journal at, answers the guest exactly as the
journal says and asks the world only what the journal lacks.

A crash after step k leaves the journal's first k steps (each step is
appended whole, docs/durable.md): cutting an uninterrupted run's journal
there is that journal. The model, the MCP server and the Python tool count
what reaches them, so "no paid call repeated" is checked where it is paid.
"""

from __future__ import annotations

import json
import re
import sys
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
from spearpy.testing import ScriptedServer
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
