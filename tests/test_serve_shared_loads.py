"""What the service shares between runs: a module's load among requests
that arrive together (serve/modules.py RecentModules), and a process's
journal store among its runs (executors/journals.py)."""

from __future__ import annotations

import asyncio
import os
import pickle
import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from spearpy.executors.journals import SharedJournalSpec, shared_spec, shared_store
from spearpy.journal import JournalError, JournalReader, SyncPolicy
from spearpy.serve.modules import Loaded, RecentModules
from spearpy.serve.schema import RunRequest


def _request(module: str = "c_chat") -> RunRequest:
    return RunRequest(module=module)


def test_requests_that_miss_together_share_one_load() -> None:
    calls: list[str] = []
    gate = threading.Event()

    def loader() -> Loaded:
        gate.wait(10)  # every request is waiting by the time it returns
        calls.append("load")
        return ("host", "module", b"wasm")  # type: ignore[return-value]

    async def main() -> list[Loaded]:
        recent = RecentModules()
        waiting = [asyncio.ensure_future(recent.load(_request(), loader)) for _ in range(16)]
        await asyncio.sleep(0.05)
        gate.set()
        loaded = await asyncio.gather(*waiting)
        # Kept: the next request loads nothing.
        loaded.append(await recent.load(_request(), loader))
        return loaded

    loaded = asyncio.run(main())
    assert calls == ["load"]
    assert all(item == ("host", "module", b"wasm") for item in loaded)


def test_a_failed_load_fails_every_waiter_and_is_not_kept() -> None:
    calls: list[int] = []

    def loader() -> Loaded:
        calls.append(1)
        raise ValueError("no such module")

    async def main() -> list[BaseException | Loaded]:
        recent = RecentModules()
        first = await asyncio.gather(*(recent.load(_request(), loader) for _ in range(4)),
                                     return_exceptions=True)
        again = await asyncio.gather(recent.load(_request(), loader), return_exceptions=True)
        return [*first, *again]

    results = asyncio.run(main())
    assert all(isinstance(r, ValueError) for r in results)
    assert len(calls) == 2  # one shared attempt, then one more: the failure was not kept


def test_a_waiter_that_gives_up_does_not_cancel_the_others_load() -> None:
    gate = threading.Event()

    def loader() -> Loaded:
        gate.wait(10)
        return ("host", "module", b"wasm")  # type: ignore[return-value]

    async def main() -> Loaded:
        recent = RecentModules()
        leaving = asyncio.ensure_future(recent.load(_request(), loader))
        staying = asyncio.ensure_future(recent.load(_request(), loader))
        await asyncio.sleep(0.05)
        leaving.cancel()  # its client hung up
        await asyncio.sleep(0)
        gate.set()
        return await staying

    assert asyncio.run(main()) == ("host", "module", b"wasm")


def test_runs_of_a_process_share_its_journal_store(tmp_path: Path) -> None:
    store = f"sqlite:{tmp_path / 'journals.sqlite3'}"
    first, second = shared_spec(store, "a", SyncPolicy.NONE), shared_spec(store, "b",
                                                                           SyncPolicy.NONE)
    assert first.locate()[0] is second.locate()[0]
    assert first.locate()[1] == "a" and second.locate()[1] == "b"
    # To a worker process it travels as the same spec, and shares there.
    copy = pickle.loads(pickle.dumps(first))
    assert type(copy) is SharedJournalSpec and copy == first
    # A journal written through the shared store reads back.
    writer = first.locate()[0].open_writer("a", sync=SyncPolicy.NONE)
    writer.append(0, "start", b'{"x":1}')
    writer.close()
    assert first.locate()[0].info("a") is not None


def test_a_replaced_database_gets_a_new_store(tmp_path: Path) -> None:
    path = tmp_path / "journals.sqlite3"
    old = shared_store(f"sqlite:{path}")
    for name in os.listdir(tmp_path):
        if name.startswith("journals.sqlite3") and not name.endswith(".locks"):
            os.remove(tmp_path / name)
    new = shared_store(f"sqlite:{path}")
    assert new is not old
    assert new.info("missing") is None  # its tables were made again


def test_other_stores_are_not_shared(tmp_path: Path) -> None:
    spec = SharedJournalSpec(str(tmp_path / "run.jsonl"))
    store, journal_id = spec.locate()
    assert journal_id == "run" and store is not spec.locate()[0]
    with pytest.raises(Exception, match="no journal"):
        JournalReader(store, "run")


def test_writers_on_many_threads_share_a_connection_and_keep_their_records(
        tmp_path: Path) -> None:
    from concurrent.futures import ThreadPoolExecutor

    store = shared_store(f"sqlite:{tmp_path / 'journals.sqlite3'}")

    def journal(index: int) -> None:
        writer = store.open_writer(f"run{index}", sync=SyncPolicy.NONE)
        try:
            for seq in range(5):
                writer.append(seq, "step", f'{{"run":{index},"seq":{seq}}}'.encode())
            writer.append(5, "end", b"{}")
        finally:
            writer.close()

    with ThreadPoolExecutor(16) as pool:
        list(pool.map(journal, range(48)))
    for index in range(48):
        rows = store._read("SELECT seq, record FROM {steps} WHERE journal_id = ? ORDER BY seq",
                           (f"run{index}",))
        assert [seq for seq, _ in rows] == list(range(6))
        assert all(f'"run":{index},' in record for _, record in rows[:5])
        info = store.info(f"run{index}")
        assert info is not None and info.ended


def test_a_refused_transaction_does_not_take_the_next_writers_records(tmp_path: Path) -> None:
    store = shared_store(f"sqlite:{tmp_path / 'journals.sqlite3'}")
    first = store.open_writer("first", sync=SyncPolicy.NONE)
    second = store.open_writer("second", sync=SyncPolicy.NONE)
    first.append(0, "start", b"{}")
    # The same seq again: the end's transaction fails on the primary key and rolls back.
    with pytest.raises(JournalError):
        first.append(0, "end", b"{}")
    second.append(0, "start", b"{}")  # autocommits on its own
    first.close()
    second.close()
    assert store.info("first") is not None and not store.info("first").ended  # type: ignore[union-attr]
    assert len(store._read("SELECT 1 FROM {steps} WHERE journal_id = 'second'", ())) == 1


def _group_of_two(tmp_path: Path, first: tuple[str, tuple[object, ...]],
                  second: tuple[str, tuple[object, ...]], setup: str = "",
                  before_commit: Callable[[], None] | None = None
                  ) -> tuple[list[BaseException | None], sqlite3.Connection]:
    """Run two statements on the shared writer connection so that they
    commit as one group: both queue while a transaction holds it."""
    store = shared_store(f"sqlite:{tmp_path / 'journals.sqlite3'}")
    conn = store._connect(SyncPolicy.NONE)  # the shared one
    conn.execute("CREATE TABLE IF NOT EXISTS t (k INTEGER PRIMARY KEY, v TEXT)")
    if setup:
        conn.execute(setup)
    conn.execute("INSERT INTO t VALUES (1, 'old')")
    errors: list[BaseException | None] = [None, None]
    conn.execute("BEGIN")  # holds the connection: the two below queue
    threads = []
    for index, (sql, params) in enumerate((first, second)):
        def run(index: int = index, sql: str = sql, params: tuple[object, ...] = params) -> None:
            try:
                conn.execute(sql, params)
            except BaseException as exc:
                errors[index] = exc
        threads.append(threading.Thread(target=run))
        threads[-1].start()
    deadline = time.monotonic() + 10
    while len(conn._ops) < 2:  # both waiting
        assert time.monotonic() < deadline
        time.sleep(0.01)
    if before_commit is not None:
        before_commit()
    conn.execute("COMMIT")
    for thread in threads:
        thread.join(10)
    return errors, sqlite3.connect(tmp_path / "journals.sqlite3")


def test_a_statement_that_fails_in_a_group_commit_fails_alone(tmp_path: Path) -> None:
    errors, check = _group_of_two(tmp_path, ("INSERT INTO t VALUES (?, ?)", (1, "dup")),
                                  ("INSERT INTO t VALUES (?, ?)", (2, "new")))
    assert isinstance(errors[0], sqlite3.IntegrityError) and errors[1] is None
    assert check.execute("SELECT k, v FROM t ORDER BY k").fetchall() == [(1, "old"), (2, "new")]


def test_a_group_the_database_rolls_back_fails_every_statement_in_it(tmp_path: Path) -> None:
    trigger = ("CREATE TRIGGER IF NOT EXISTS full BEFORE INSERT ON t WHEN NEW.v = 'full' "
               "BEGIN SELECT RAISE(ROLLBACK, 'the disk is full'); END")
    errors, check = _group_of_two(tmp_path, ("INSERT INTO t VALUES (?, ?)", (2, "kept?")),
                                  ("INSERT INTO t VALUES (?, ?)", (3, "full")), setup=trigger)
    # The first was rolled back with the group: it must not be told it was stored.
    assert all(isinstance(e, sqlite3.Error) for e in errors), errors
    assert check.execute("SELECT k FROM t ORDER BY k").fetchall() == [(1,)]


def test_a_group_waits_for_another_process_writing_instead_of_failing(tmp_path: Path) -> None:
    """A group that reads, then writes: another connection (a worker
    process) holding the write lock and committing meanwhile must make it
    wait, not fail (a deferred transaction's snapshot would be stale)."""
    other: list[sqlite3.Connection] = []

    def hold_the_write_lock() -> None:
        db = sqlite3.connect(tmp_path / "journals.sqlite3", isolation_level=None,
                             check_same_thread=False)
        db.execute("BEGIN IMMEDIATE")
        db.execute("INSERT INTO t VALUES (5, 'other')")
        other.append(db)
        threading.Timer(0.3, lambda: db.execute("COMMIT")).start()

    errors, check = _group_of_two(tmp_path, ("SELECT count(*) FROM t", ()),
                                  ("INSERT INTO t VALUES (?, ?)", (2, "new")),
                                  before_commit=hold_the_write_lock)
    assert errors == [None, None]
    assert check.execute("SELECT k FROM t ORDER BY k").fetchall() == [(1,), (2,), (5,)]
