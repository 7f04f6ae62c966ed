"""When a journaled run's answers reach its journal file (docs/durable.md,
"The guarantees"): calls that only answer the guest (a clock, a frame a
client already sent, which fds are ready) do not write the journal out
before them, as calls that ask or tell the world something do; what they
answered is written before the guest waits for the world, and at least
every ANSWERS_WAIT_S while it goes on without waiting.

Real parts: WAT guests run by a Host, a stream hub's client, journal files
read while the run goes on."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from spearpy.durable import JournalSpec
from spearpy.host import Host
from spearpy.journal import FileJournalStore, JournalError, SyncPolicy
from spearpy.journal.records import Step
from spearpy.journal.writer import JournalWriter
from tests.probe import wat_module

IDLE = wat_module("stream_idle.wat")
SPIN = wat_module("clock_spin.wat")
ONCE = wat_module("clock_once_spin.wat")
WAIT_S = 60.0  # against a hung host only


@pytest.fixture(scope="module")
def host() -> Iterator[Host]:
    with Host(cache_dir=None, base_url="http://127.0.0.1:9/v1", api_key_env="") as host:
        yield host


def _calls(path: Path) -> list[tuple[str, int | None]]:
    """(call, rc) of each hostcall step the file holds now (none before
    the run has made it)."""
    text = path.read_text() if path.exists() else ""
    steps = [json.loads(line) for line in text.splitlines() if line]
    return [(s["request"]["call"], s["answer"]["rc"]) for s in steps if s["kind"] == "hostcall"]


def _frames_read(path: Path) -> int:
    return sum(1 for call, rc in _calls(path)
               if call == "user_streams.user_stream_read" and rc is not None and rc > 0)


def _until(done: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not done():
        assert time.monotonic() < deadline, what
        time.sleep(0.01)


def test_a_frame_the_guest_read_is_in_the_file_while_it_waits_for_the_next(
        host: Host, tmp_path: Path) -> None:
    path = tmp_path / "idle.jsonl"
    handle = host.start(IDLE, streams=True, journal=JournalSpec(path), limits={"timeout": 120})
    stream = handle.open_stream(1)
    stream.send(b"first", timeout=WAIT_S)
    # The guest reads it, then waits in epoll (no timeout) for the next frame.
    _until(lambda: _frames_read(path) == 1,
           "the frame read is not in the journal file while the guest waits")
    assert not handle.done()
    stream.send(b"second", timeout=WAIT_S)
    result = handle.result(timeout=WAIT_S)
    assert result.outcome == "exited", result.message
    # The guest prints each frame it read whole (its header, then its payload).
    assert result.stdout.index(b"first") < result.stdout.index(b"second")
    assert _frames_read(path) == 2


@pytest.mark.parametrize(("module", "what"), [
    # The second reading comes after ~0.5 G loop turns (well past
    # ANSWERS_WAIT_S): the first is written out before it.
    (SPIN, "the first clock reading"),
    # No call comes after the reading: only the bound writes it.
    (ONCE, "the last clock reading"),
])
def test_a_reading_is_in_the_file_while_the_guest_computes_on(
        host: Host, tmp_path: Path, module: bytes, what: str) -> None:
    path = tmp_path / "spin.jsonl"
    handle = host.start(module, journal=JournalSpec(path), limits={"timeout": 120})
    try:
        _until(lambda: [c for c, _rc in _calls(path)].count("system.time_now_ms") >= 1,
               f"{what} is not in the journal file")
        assert not handle.done()
    finally:
        handle.cancel()
    assert handle.result(timeout=WAIT_S).outcome == "cancelled"


def test_a_write_on_the_flusher_that_fails_keeps_its_records_for_the_runs_next_flush(
        tmp_path: Path) -> None:
    store = FileJournalStore(tmp_path)
    writer = JournalWriter.open(store, "run", buffered=True, sync=SyncPolicy.NONE)
    writer.start(module=b"m", argv=[], env=[], stdin=b"", limits={}, flags={})
    writer.flush()
    writer.append_hostcall("system.random_i64", (), 1, [], 0.0)
    tried = threading.Event()

    def refuse(records: list[tuple[int, str, bytes]]) -> None:
        tried.set()
        raise JournalError("the disk is full")

    writer._handle.append_many = refuse  # type: ignore[method-assign]
    writer.flush_soon()  # the guest waits meanwhile; nothing is raised to it
    assert tried.wait(WAIT_S)
    with pytest.raises(JournalError, match="disk is full"):
        writer.flush()  # the run's next call of the world is told
    del writer._handle.append_many  # type: ignore[attr-defined]
    writer.append_hostcall("system.random_i64", (), 2, [], 0.0)
    writer.close()
    writer.flush_soon()  # a late one, after the close: writes nothing, raises nothing
    records = list(store.records("run"))
    assert [r.seq for r in records] == [0, 1, 2]
    assert [r.answer["rc"] for r in records if isinstance(r, Step)] == [1, 2]
