"""A message from a process worker that the parent cannot read: the worker
pickled it, the parent's unpickling fails (a class only the worker has, a
constructor that raises here). Real worker processes running real guests;
what makes their messages unreadable is test code the workers import at
startup (a sitecustomize on their PYTHONPATH), so the parent reads them
exactly as it would any other."""

from __future__ import annotations

import operator
import os
import pickle
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from spearpy import HostConfig
from spearpy.executors.procs import ProcessRuns
from spearpy.observe.events import Event
from spearpy.outcome import RunResult
from tests.test_executors import HELLO, LOOP, WAIT_S, Watch, _submit, _wait_until

# Imported by each worker process at startup, never by the parent: a run
# keyed odd-end-* ends with an object of a class the parent does not have in
# its result; a run keyed odd-event-* sends, after its run_start, an event
# whose rebuilding raises (it divides by zero) wherever it is unpickled.
SITECUSTOMIZE = '''
import dataclasses
import operator

import spearpy.executors.base as base

_run_on = base.run_on


class WorkerOnly:
    pass


class Divides:
    def __reduce__(self):
        return (operator.truediv, (1, 0))


def run_on(host, module, job, cancel, on_event):
    if job.key.startswith("odd-event") and on_event is not None:
        inner = on_event

        def on_event(event):
            inner(event)
            if event.kind == "run_start":
                inner(Divides())
    result = _run_on(host, module, job, cancel, on_event)
    if job.key.startswith("odd-end"):
        result = dataclasses.replace(result, transcripts=[{"value": WorkerOnly()}])
    return result


base.run_on = run_on
'''


class FailingWatch(Watch):
    """A caller whose on_end fails (its side broke), after noting the end."""

    def on_end(self, result: RunResult | None, error: BaseException | None) -> None:
        super().on_end(result, error)
        raise RuntimeError("the caller's on_end failed")


class _Divides:
    """Pickles anywhere; rebuilding it raises (as SITECUSTOMIZE's Divides)."""

    def __reduce__(self) -> tuple[Any, ...]:
        return (operator.truediv, (1, 0))


def _write_frame(pid: int, body: bytes) -> None:
    """One frame, as Connection writes them, on the worker's end of the pipe
    it answers on (`python -m ... SPEC TASK RESULT`), through /proc."""
    result_fd = (Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0"))[-2].decode()
    with open(f"/proc/{pid}/fd/{result_fd}", "wb", buffering=0) as pipe:
        pipe.write(struct.pack("!i", len(body)) + body)


def _replaced(procs: ProcessRuns, pid: int) -> None:
    _wait_until(lambda: procs.worker_pids() not in ([], [pid]), "the worker's replacement")


@pytest.fixture
def procs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[ProcessRuns]:
    """One worker running two runs at once, with the test's sitecustomize."""
    hooks = tmp_path / "hooks"
    hooks.mkdir()
    (hooks / "sitecustomize.py").write_text(SITECUSTOMIZE)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
        p for p in (str(hooks), os.environ.get("PYTHONPATH")) if p))
    script = tmp_path / "idle.json"
    script.write_text('{"default": {"content": "idle"}}')
    runs = ProcessRuns(HostConfig(backend=f"scripted:{script}", cache_dir=None), 2, workers=1)
    runs.start()
    try:
        yield runs
    finally:
        runs.close()


def test_an_unreadable_message_ends_only_its_run(procs: ProcessRuns) -> None:
    """A run whose end, or whose event, the parent cannot rebuild ends
    host_error naming why; the worker and its other runs go on. The run
    whose event was unreadable is cancelled on the worker too: with two runs
    at a time there and one that never ends, the next run gets a thread
    only because of it."""
    steady = _submit(procs, "steady", LOOP)
    assert steady.started.wait(WAIT_S)
    [pid] = procs.worker_pids()

    odd_end = _submit(procs, "odd-end-1", HELLO).result()
    assert odd_end.outcome == "host_error" and odd_end.exit_code == 70, odd_end
    assert "could not be read" in odd_end.message and "WorkerOnly" in odd_end.message, \
        odd_end.message
    assert f"pid {pid}" in odd_end.message

    odd_event = _submit(procs, "odd-event-1", LOOP).result()
    assert odd_event.outcome == "host_error", odd_event
    assert "ZeroDivisionError" in odd_event.message, odd_event.message

    plain = _submit(procs, "plain", HELLO).result()
    assert (plain.outcome, plain.exit_code) == ("exited", 0), plain
    assert b"hello from C" in (plain.stdout or b"")

    assert procs.worker_pids() == [pid] and procs.workers_lost == 0
    assert not steady.ended.is_set()
    procs.cancel("steady")
    assert steady.result().outcome == "cancelled"


def test_a_message_that_names_no_run_ends_the_worker_with_a_clear_reason(
        procs: ProcessRuns) -> None:
    """Bytes on the worker's pipe that are no pickle at all name no run:
    the worker is stopped and replaced, and its runs end worker_lost saying
    its message could not be read (not that it was killed)."""
    steady = _submit(procs, "steady", LOOP)
    assert steady.started.wait(WAIT_S)
    [pid] = procs.worker_pids()
    # The looping guest writes nothing meanwhile.
    _write_frame(pid, b"\x80\x05not a pickle")
    lost = steady.result()
    assert lost.outcome == "worker_lost", lost
    assert f"pid {pid}" in lost.message and "could not be read" in lost.message, lost.message
    assert "SIGKILL" not in lost.message
    _replaced(procs, pid)
    assert procs.workers_lost == 1
    again = _submit(procs, "plain", HELLO).result()
    assert (again.outcome, again.exit_code) == ("exited", 0), again


def test_a_failing_on_end_of_an_unreadable_run_leaves_the_worker_reading(
        procs: ProcessRuns) -> None:
    """The caller's on_end raising for a run ended because its message
    could not be read is the caller's failure, as for any other end: the
    worker and its reader go on (they were lost, after a 10 s wait and a
    SIGKILL, and the next run with them)."""
    [pid] = procs.worker_pids()
    odd = _submit(procs, "odd-end-2", HELLO, watch=FailingWatch()).result()
    assert odd.outcome == "host_error", odd
    plain = _submit(procs, "plain", HELLO).result()
    assert (plain.outcome, plain.exit_code) == ("exited", 0), plain
    assert procs.worker_pids() == [pid] and procs.workers_lost == 0


def test_a_stopped_worker_says_why_in_bounded_words(procs: ProcessRuns) -> None:
    """An unreadable message of a kind naming no run stops the worker; its
    runs' message quotes the kind cut short, however long it is."""
    steady = _submit(procs, "steady", LOOP)
    assert steady.started.wait(WAIT_S)
    [pid] = procs.worker_pids()
    _write_frame(pid, pickle.dumps(("k" * 100_000, _Divides())))
    lost = steady.result()
    assert lost.outcome == "worker_lost" and "could not be read" in lost.message, lost
    assert len(lost.message) < 1000, len(lost.message)
    _replaced(procs, pid)


def test_a_write_that_stops_the_worker_still_delivers_its_readable_ends(
        procs: ProcessRuns) -> None:
    """A combined write holding a run's readable end and an unreadable
    message naming no run: the worker is stopped, and the run ends with the
    result its worker sent (not worker_lost, its result dropped)."""
    steady = _submit(procs, "steady", LOOP)
    assert steady.started.wait(WAIT_S)
    [pid] = procs.worker_pids()
    sent = RunResult(run_id="r-steady", exit_code=0, outcome="exited", stdout=b"sent")
    _write_frame(pid, pickle.dumps(("batch", [("end", "steady", sent, None),
                                              ("mystery", _Divides())])))
    assert steady.result() == sent
    _replaced(procs, pid)
    assert procs.workers_lost == 1


def test_a_runs_events_before_its_unreadable_end_are_delivered_in_order(
        procs: ProcessRuns) -> None:
    """A combined write with a run's event and then its end, which cannot
    be rebuilt: the event reaches the caller, then the run ends host_error
    (the event was dropped, its run already ended)."""
    steady = _submit(procs, "steady", LOOP)
    assert steady.started.wait(WAIT_S)
    [pid] = procs.worker_pids()
    odd = RunResult(run_id="r-steady", exit_code=0, outcome="exited",
                    transcripts=[{"value": _Divides()}])
    _write_frame(pid, pickle.dumps(("batch", [("event", "steady", Event("note", "r", 9, 0.0)),
                                              ("end", "steady", odd, None)])))
    assert steady.result().outcome == "host_error"
    assert steady.kinds[-1] == "note", steady.kinds
    assert procs.worker_pids() == [pid] and procs.workers_lost == 0


def test_a_combined_write_keeps_the_messages_that_can_be_read() -> None:
    """Several runs' messages in one write (worker._Combined), one of which
    holds an object that cannot be rebuilt: read again, every other message
    is whole, and the one that failed says why."""
    from spearpy.executors.unreadable import first_unreadable, salvage

    ok_end = RunResult(run_id="r-c", exit_code=0, outcome="exited", transcripts=[{"a": [1]}])
    write = ("batch", [("event", "a", {"kind": "run_start"}),
                       ("end", "b", RunResult(run_id="r-b", exit_code=0, outcome="exited",
                                              transcripts=[{"value": _Divides()}]), None),
                       ("end", "c", ok_end, None)])
    data = pickle.dumps(write)
    with pytest.raises(ZeroDivisionError):
        pickle.loads(data)
    parts = salvage(data)
    assert parts is not None
    assert [part[:2] for part in parts] == [("event", "a"), ("end", "b"), ("end", "c")]
    assert parts[0] == write[1][0] and parts[2] == ("end", "c", ok_end, None)
    assert first_unreadable(parts[0]) is None and first_unreadable(parts[2]) is None
    bad = first_unreadable(parts[1])
    assert bad is not None and bad.why.startswith("ZeroDivisionError")
    assert salvage(b"\x80\x05not a pickle") is None


def test_a_declared_length_longer_than_the_write_allocates_nothing() -> None:
    """A write of a few bytes that declares a bytearray of 256 MiB: the C
    unpickler finds it truncated without touching that memory; read again,
    it must not be allocated (and zero-filled) either: a worker's 20-byte
    frame declaring most of the machine's memory would have the parent
    fill it."""
    import tracemalloc

    from spearpy.executors.unreadable import salvage

    data = b"\x80\x05\x96" + struct.pack("<Q", 256 << 20) + b"."  # BYTEARRAY8, STOP
    with pytest.raises(pickle.UnpicklingError):
        pickle.loads(data)
    tracemalloc.start()
    try:
        assert salvage(data) is None
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20, peak
    whole = pickle.dumps(("event", "k", bytearray(b"kept")), protocol=5)
    assert salvage(whole) == [("event", "k", bytearray(b"kept"))]


def test_an_import_that_exits_is_read_as_unreadable(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """A message naming a class of a module that raises SystemExit when
    imported here: pickle.loads raises it (the read loop catches every
    exception), and the second reading turns it into an Unreadable like any
    other failure, instead of letting it end the read loop."""
    from spearpy.executors.unreadable import first_unreadable, salvage

    (tmp_path / "exits_on_import.py").write_text("raise SystemExit(3)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    # ("end", "k", <exits_on_import.Thing>, None), by hand: GLOBAL where the result goes.
    data = (b"\x80\x02(X\x03\x00\x00\x00endX\x01\x00\x00\x00k"
            b"cexits_on_import\nThing\nNt.")
    with pytest.raises(SystemExit):
        pickle.loads(data)
    parts = salvage(data)
    assert parts is not None and parts[0][:2] == ("end", "k")
    bad = first_unreadable(parts[0])
    assert bad is not None and "SystemExit" in bad.why, parts


class Guarded:
    """Rebuilt here, but whose attributes cannot be looked into."""

    def __getattribute__(self, name: str) -> Any:
        if name == "__dict__":
            raise RuntimeError("no looking inside")
        return super().__getattribute__(name)


def test_a_part_that_cannot_be_looked_into_is_unreadable_not_fatal() -> None:
    """Looking for what failed through a message's objects runs their
    attribute lookups: one that raises makes that message unreadable like
    any other failure (the other messages are kept), instead of ending the
    read loop."""
    from spearpy.executors.unreadable import sort_out

    data = pickle.dumps(("batch", [("event", "a", _Divides(), Guarded()),
                                   ("event", "b", {"kind": "ok"})]))
    with pytest.raises(ZeroDivisionError) as exc:
        pickle.loads(data)
    message, stop = sort_out(data, exc.value)
    assert stop is None
    assert message[1][0][:2] == ("unreadable", "a")
    assert message[1][1] == ("event", "b", {"kind": "ok"})
