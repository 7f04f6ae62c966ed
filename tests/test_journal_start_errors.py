"""What a journal's start record holds reaches the errors that refuse it
(`spearpy resume`/`replay`, Host.resume) escaped and short: a journal file
may be hand-made, and its errors reach terminals and logs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from spearpy.config import HostConfig
from spearpy.durable import JournalSpec
from spearpy.host import Host
from spearpy.journal import JournalError
from spearpy.testing import ScriptedServer
from tests.test_durable_cli import MULTI_SCRIPT, _journaled_run, _records, _spearpy

# Generous for one error line with a journal's path in it; far below what
# the crafted starts below would print whole (tens of KB).
MESSAGE_MAX = 2000
LOUD = "\x1b]0;owned\x07\x1b[31m\nspearpy: forged line "


@pytest.fixture
def own_journal(tmp_path: Path) -> Path:
    with ScriptedServer(MULTI_SCRIPT) as server:
        journal, _ = _journaled_run(tmp_path, server)
    return journal


def _crafted(journal: Path, into: Path, edit: Any) -> Path:
    records = _records(journal)
    edit(records[0])
    into.write_text("".join(json.dumps(r, separators=(",", ":")) + "\n" for r in records))
    return into


def _host_keys(start: dict[str, Any]) -> None:
    start["flags"]["host"].update({f"{LOUD}{i}": "x" * 200 for i in range(300)})


def _limits(start: dict[str, Any]) -> None:
    start["limits"] = {f"{LOUD}{i}": 1 for i in range(3000)}


def _argv(start: dict[str, Any]) -> None:
    start["argv"] = [*start["argv"], "\0" + "x" * 100_000]


@pytest.mark.parametrize("edit", [_host_keys, _limits, _argv])
def test_spearpy_replay_refuses_a_hand_made_start_in_one_short_line(
        tmp_path: Path, own_journal: Path, edit: Any) -> None:
    crafted = _crafted(own_journal, tmp_path / "crafted.jsonl", edit)
    done = _spearpy("replay", crafted, cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    assert "\x1b" not in done.stderr and done.stderr.count("\n") == 1, done.stderr[:500]
    assert len(done.stderr) < MESSAGE_MAX, done.stderr[:500]


@pytest.mark.parametrize("edit", [_limits, _argv])
def test_host_resume_refuses_a_hand_made_start_in_one_short_line(
        tmp_path: Path, own_journal: Path, edit: Any) -> None:
    crafted = _crafted(own_journal, tmp_path / "crafted.jsonl", edit)
    with Host(HostConfig(cache_dir=None, base_url="http://127.0.0.1:9/v1",
                         api_key_env="")) as host, pytest.raises(JournalError) as refused:
        host.resume(JournalSpec(crafted))
    message = str(refused.value)
    assert "\x1b" not in message and "\n" not in message, message[:500]
    assert len(message) < MESSAGE_MAX, message[:500]
