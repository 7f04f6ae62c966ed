"""A run's journal is written once per paid call, and synced off the run's path.

A run's JournalWriter buffers its records and writes them out together
before the next paid call (a completion, a tool that is not the guest's),
at each send's end and at its end; under --journal-sync send the send's
fdatasync runs on a worker and is waited for before the next paid call
(docs/durable.md, "fsync policies"). What must hold, checked here where the
paid call is made: every record of the calls before it is in the file, and
durable, when it is made. Also the journal's reads by page and its last
record, and a resume reading its journal once.
"""

from __future__ import annotations

import itertools
import json
import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from bench.wat_agent import agent_wasm
from spearpy import CompletionRequest, CompletionResult, Host, RunResult
from spearpy.durable import JournalSpec
from spearpy.journal import (
    End,
    FileJournalStore,
    JournalCorrupt,
    JournalError,
    JournalWriter,
    SQLiteJournalStore,
    Start,
    Step,
    SyncPolicy,
)
from spearpy.journal import _sync as background
from spearpy.journal.records import hostcall_answer
from spearpy.observe.scrub import SecretScrubber

SENDS = 4


def _kinds(path: Path) -> list[str]:
    return [json.loads(line)["kind"] for line in path.read_bytes().split(b"\n")[:-1]]


class _Watcher:
    """An in-process model that looks at the run's journal file each time it
    is asked (the moment a paid call is made), and at the syncs."""

    name = "watcher"
    default_model = "w"

    def __init__(self, journal: Path, events: list[str]) -> None:
        self.journal = journal
        self.events = events
        self.seen: list[int] = []  # completion records in the file at each request

    def complete(self, request: CompletionRequest) -> CompletionResult:
        self.events.append("complete")
        self.seen.append(_kinds(self.journal).count("chat.completion"))
        body = {"choices": [{"index": 0, "finish_reason": "stop",
                             "message": {"role": "assistant", "content": "hi"}}]}
        return CompletionResult(self.name, request.model, body=body)

    def close(self) -> None:
        pass


def _run_watched(journal: Path, events: list[str]) -> tuple[_Watcher, RunResult]:
    """The agent's run of SENDS sends, journaled to journal, on a _Watcher."""
    model = _Watcher(journal, events)
    with Host(cache_dir=None, model="w", base_url="http://127.0.0.1:9/v1") as host:
        host.use_backend(model)
        return model, host.run(agent_wasm(SENDS), journal=JournalSpec(journal))


def test_every_record_is_written_and_synced_before_the_next_paid_call(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    events: list[str] = []
    real = os.fdatasync

    def slow_sync(fd: int) -> None:
        # A slow disk: a sync not waited for would let the next request in first.
        events.append("sync start")
        time.sleep(0.05)
        real(fd)
        events.append("sync end")

    monkeypatch.setattr(background.os, "fdatasync", slow_sync)
    journal = tmp_path / "run.jsonl"
    model, result = _run_watched(journal, events)
    assert (result.outcome, result.exit_code) == ("exited", 0), result.message
    assert model.seen == list(range(SENDS))  # each earlier completion, in the file
    # A send's sync began when it ended, and ended before the next request.
    completes = [i for i, event in enumerate(events) if event == "complete"]
    for before, after in itertools.pairwise(completes):
        between = events[before + 1:after]
        assert between[-2:] == ["sync start", "sync end"], events
    assert _kinds(journal).count("chat.completion") == SENDS and _kinds(journal)[-1] == "end"


def test_buffered_records_reach_the_file_together_at_a_flush(tmp_path: Path) -> None:
    store = FileJournalStore(tmp_path)
    path = store.path_of("run")
    writer = JournalWriter.open(store, "run", buffered=True, sync=SyncPolicy.NONE)
    writer.start(module=b"m", argv=[], env=[], stdin=b"", limits={}, flags={})
    for n in range(3):
        size = writer.append("hostcall", {"call": "system.random_i64", "args": []},
                             hostcall_answer(n, [], 0.0, SecretScrubber()))
        assert size > 0
    assert writer.next_seq == 4 and path.read_bytes() == b""  # numbered, not yet written
    writer.flush()
    assert _kinds(path) == ["start", "hostcall", "hostcall", "hostcall"]
    assert writer.bytes_used == path.stat().st_size
    writer.append("hostcall", {"call": "system.random_i64", "args": []},
                  hostcall_answer(9, [], 0.0, SecretScrubber()))
    writer.close()  # a close writes what is left
    assert _kinds(path)[-1] == "hostcall" and len(_kinds(path)) == 5


def test_a_failed_background_sync_is_an_error_at_the_next_flush(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def failing(fd: int) -> None:
        raise OSError(5, "Input/output error")

    store = FileJournalStore(tmp_path)
    writer = JournalWriter.open(store, "run", buffered=True)
    writer.start(module=b"m", argv=[], env=[], stdin=b"", limits={}, flags={})
    monkeypatch.setattr(background.os, "fdatasync", failing)
    writer.sync()  # begun on the worker
    with pytest.raises(JournalError, match=r"cannot sync journal .*Input/output error"):
        writer.flush()
    writer.flush()  # said once: the journal goes on
    writer.close()


# ---- reads -------------------------------------------------------------------------


def _stores(tmp_path: Path) -> list[Any]:
    return [FileJournalStore(tmp_path / "files"), SQLiteJournalStore(tmp_path / "j.sqlite3")]


@pytest.mark.parametrize("kind", ["file", "sqlite"])
@pytest.mark.parametrize("ended", [False, True])
def test_records_after_a_step_and_the_last_record(tmp_path: Path, kind: str,
                                                  ended: bool) -> None:
    store = _stores(tmp_path)[0 if kind == "file" else 1]
    writer = JournalWriter.open(store, "run")
    writer.start(module=b"m", argv=[], env=[], stdin=b"", limits={}, flags={})
    assert isinstance(store.last_record("run"), Start)
    for n in range(10):
        writer.append("hostcall", {"call": "system.random_i64", "args": []},
                      hostcall_answer(n, [], 0.0, SecretScrubber()))
    if ended:
        writer.end("exited", 0)
    writer.close()
    assert [r.seq for r in store.records("run", after=6)] == \
        list(range(7, 12 if ended else 11))
    assert [r.seq for r in store.records("run", after=-1)][:2] == [0, 1]
    assert list(store.records("run", after=50)) == []
    last = store.last_record("run")
    assert last is not None and last.seq == (11 if ended else 10)
    assert isinstance(last, End) == ended
    with pytest.raises(JournalError, match="no journal"):
        store.last_record("other")
    store.close()


def test_a_page_after_a_damaged_line_reads_on_and_a_read_through_it_does_not(
        tmp_path: Path) -> None:
    store = FileJournalStore(tmp_path)
    writer = JournalWriter.open(store, "run")
    writer.start(module=b"m", argv=[], env=[], stdin=b"", limits={}, flags={})
    for n in range(6):
        writer.append("hostcall", {"call": "system.random_i64", "args": []},
                      hostcall_answer(n, [], 0.0, SecretScrubber()))
    writer.close()
    path = store.path_of("run")
    lines = path.read_bytes().split(b"\n")
    lines[2] = b"{" + lines[2][1:].replace(b'"', b"'", 1)  # step 2 damaged
    path.write_bytes(b"\n".join(lines))
    assert [r.seq for r in store.records("run", after=3)] == [4, 5, 6]
    with pytest.raises(JournalCorrupt, match="line 3"):
        list(store.records("run", after=0))


def test_a_resume_over_a_damaged_journal_never_goes_live_past_the_damage(
        tmp_path: Path) -> None:
    """Opening it, the writer counts lines without decoding them (the reader
    decodes each once); the damaged step stops the replay there, and nothing
    is appended after it."""
    events: list[str] = []
    journal = tmp_path / "run.jsonl"
    with Host(cache_dir=None, model="w", base_url="http://127.0.0.1:9/v1") as host:
        host.use_backend(_Watcher(journal, events))
        done = host.run(agent_wasm(SENDS), journal=JournalSpec(journal))
        assert done.exit_code == 0
        lines = journal.read_bytes().split(b"\n")
        cut = lines[:-2]  # no end record: a crash
        completion = next(i for i, line in enumerate(cut) if b"chat.completion" in line)
        cut[completion] = cut[completion].replace(b'"answer":', b'"answr":')
        journal.write_bytes(b"\n".join(cut) + b"\n")
        before = journal.read_bytes()
        calls = len(events)
        resumed = host.run(agent_wasm(SENDS), journal=JournalSpec(journal))
    assert resumed.outcome == "replay_mismatch", resumed.message
    assert f"line {completion + 1}: no 'answer'" in resumed.message, resumed.message
    assert journal.read_bytes() == before  # nothing appended after the damage
    assert len(events) == calls  # and nothing asked


def test_a_failed_flush_keeps_its_records_for_the_next(tmp_path: Path) -> None:
    """The run went on with the answers a failed write held: none is dropped,
    nor replaced by a later record under its seq."""
    store = FileJournalStore(tmp_path)
    writer = JournalWriter.open(store, "run", buffered=True, sync=SyncPolicy.NONE)
    writer.start(module=b"m", argv=[], env=[], stdin=b"", limits={}, flags={})
    writer.flush()
    writer.append("hostcall", {"call": "system.random_i64", "args": []},
                  hostcall_answer(1, [], 0.0, SecretScrubber()))
    broken = threading.Event()

    def refuse(records: list[tuple[int, str, bytes]]) -> None:
        broken.set()
        raise JournalError("the disk is full")

    writer._handle.append_many = refuse  # type: ignore[method-assign]
    with pytest.raises(JournalError, match="disk is full"):
        writer.flush()
    assert broken.is_set() and writer.next_seq == 2
    del writer._handle.append_many  # type: ignore[attr-defined]
    writer.append("hostcall", {"call": "system.random_i64", "args": []},
                  hostcall_answer(2, [], 0.0, SecretScrubber()))
    writer.close()
    records = list(store.records("run"))
    assert [r.seq for r in records] == [0, 1, 2]
    assert [r.answer["rc"] for r in records[1:] if isinstance(r, Step)] == [1, 2]
    assert writer.bytes_used == store.path_of("run").stat().st_size


def test_a_full_buffer_whose_write_fails_keeps_it_for_the_flush_before_a_paid_call(
        tmp_path: Path) -> None:
    """The answer that filled the buffer was given: its append returns, and
    the flush before the next paid call says the journal was not written."""
    store = FileJournalStore(tmp_path)
    writer = JournalWriter.open(store, "run", buffered=True, sync=SyncPolicy.NONE)
    writer.start(module=b"m", argv=[], env=[], stdin=b"", limits={}, flags={})
    writer.flush()

    def refuse(records: list[tuple[int, str, bytes]]) -> None:
        raise JournalError("the disk is full")

    writer._handle.append_many = refuse  # type: ignore[method-assign]
    big = "x" * 30_000
    for n in range(4):  # past the buffer's 64 kB
        writer.append("tool.outcome", {"source": "mcp", "name": "t", "arguments": "{}"},
                      {"ok": True, "output": f"{n}{big}", "t": 0.0})
    with pytest.raises(JournalError, match="disk is full"):
        writer.flush()
    del writer._handle.append_many  # type: ignore[attr-defined]
    writer.flush()
    writer.close()
    assert [r.seq for r in store.records("run")] == [0, 1, 2, 3, 4]


def test_a_failed_end_write_is_kept_and_nothing_follows_the_end(tmp_path: Path) -> None:
    store = FileJournalStore(tmp_path)
    writer = JournalWriter.open(store, "run", buffered=True, sync=SyncPolicy.NONE)
    writer.start(module=b"m", argv=[], env=[], stdin=b"", limits={}, flags={})

    def refuse(records: list[tuple[int, str, bytes]]) -> None:
        raise JournalError("the disk is full")

    writer._handle.append_many = refuse  # type: ignore[method-assign]
    with pytest.raises(JournalError, match="disk is full"):
        writer.end("exited", 0)
    with pytest.raises(JournalError, match="has ended"):
        writer.append("hostcall", {"call": "system.random_i64", "args": []},
                      hostcall_answer(3, [], 0.0, SecretScrubber()))
    del writer._handle.append_many  # type: ignore[attr-defined]
    writer.close()
    assert [r.kind for r in store.records("run")] == ["start", "end"]


def _failing_sync(monkeypatch: pytest.MonkeyPatch, when: Any) -> None:
    real = os.fdatasync

    def sync(fd: int) -> None:
        if when():
            raise OSError(5, "Input/output error")
        real(fd)

    monkeypatch.setattr(os, "fdatasync", sync)  # the sync worker's


def test_a_journal_not_written_before_a_paid_call_ends_the_run(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The start's sync fails: the first completion is not asked past it
    (nor, the error said once, the next send's), the run ends host_error."""
    _failing_sync(monkeypatch, lambda: True)
    journal = tmp_path / "run.jsonl"
    model, result = _run_watched(journal, [])
    assert result.outcome == "host_error", (result.outcome, result.message)
    assert "cannot sync journal" in result.message
    assert model.seen == []
    kinds = _kinds(journal)
    assert kinds[0] == "start" and kinds[-1] == "end" and "chat.completion" not in kinds


def test_the_last_sends_sync_failing_at_the_end_is_no_exception_of_the_run(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Waited for when the journal closes, after the run ended: logged, and
    the run's result is returned as it ended."""
    events: list[str] = []
    _failing_sync(monkeypatch, lambda: events.count("complete") == SENDS)
    journal = tmp_path / "run.jsonl"
    model, result = _run_watched(journal, events)
    assert (result.outcome, result.exit_code) == ("exited", 0), result.message
    assert _kinds(journal)[-1] == "end" and model.seen == list(range(SENDS))
