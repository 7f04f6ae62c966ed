"""The service's run store and event fan-out, without HTTP: ordering, replay
past a full buffer, commit-before-publish, and recovery after a crash."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from spearpy.serve.fanout import Channel, Hub, follow
from spearpy.serve.store import RunStore, StoreLocked

Row = tuple[int, str, str]


def rows(first: int, last: int) -> list[Row]:
    return [(seq, "tool_end", json.dumps({"seq": seq})) for seq in range(first, last + 1)]


def append_committed(store: RunStore, run_id: str, events: list[Row],
                     after: Callable[[], None] = lambda: None) -> None:
    """`events` stored the way the service stores them (RunStore.append_event,
    one at a time, as runs.py does); back once the last one's commit has
    called `after`."""
    done = threading.Event()

    def last() -> None:
        try:
            after()
        finally:
            done.set()

    for row in events[:-1]:
        store.append_event(run_id, row, lambda: None)
    store.append_event(run_id, events[-1], last)
    assert done.wait(30), "the store's writer never got to the last event"


def test_a_slow_subscriber_past_the_buffer_reads_the_gap_from_the_store() -> None:
    stored: list[Row] = []

    async def read_store(after: int, before: int | None) -> list[Row]:
        await asyncio.sleep(0)
        return [r for r in stored if after < r[0] < (before if before is not None else 1 << 30)]

    async def scenario() -> tuple[list[int], list[int]]:
        channel = Channel(buffer=4)
        got_slow: list[int] = []
        got_fast: list[int] = []

        async def slow() -> None:
            async for row in follow(channel, read_store, -1, keepalive=0.05):
                if row is not None:
                    got_slow.append(row[0])
                    await asyncio.sleep(0.01)  # the run produces faster than this reader

        async def fast() -> None:
            async for row in follow(channel, read_store, 2, keepalive=0.05):
                if row is not None:
                    got_fast.append(row[0])

        readers = [asyncio.create_task(slow()), asyncio.create_task(fast())]
        for seq in range(30):
            stored.extend(rows(seq, seq))  # committed first, as RunStore does
            channel.publish(rows(seq, seq), ended=seq == 29)
            await asyncio.sleep(0.002)
        await asyncio.wait_for(asyncio.gather(*readers), 10)
        return got_slow, got_fast

    slow_seen, fast_seen = asyncio.run(scenario())
    assert slow_seen == list(range(30))
    assert fast_seen == list(range(3, 30))


def test_a_finished_run_replays_from_the_store_and_the_hub_forgets_it() -> None:
    async def scenario() -> list[int]:
        hub = Hub(buffer=8)
        hub.open("r")
        hub.publish("r", rows(0, 2), ended=True)
        assert hub.get("r") is None

        async def read_store(after: int, before: int | None) -> list[Row]:
            return [r for r in rows(0, 2) if r[0] > after]

        return [row[0] async for row in follow(None, read_store, 0) if row is not None]

    assert asyncio.run(scenario()) == [1, 2]


def test_store_commits_before_it_tells_and_recovers_runs_left_running(tmp_path: Path) -> None:
    store = RunStore(tmp_path)
    with pytest.raises(StoreLocked):
        RunStore(tmp_path)
    seen_in_callback: list[int] = []
    store.insert_run({"id": "a", "created_at": 1.0, "status": "running", "module": "m.wasm",
                      "request": {"args": []}}).result(5)
    append_committed(store, "a", rows(0, 2), after=lambda: seen_in_callback.extend(
        r[0] for r in store.events("a")))
    assert seen_in_callback == [0, 1, 2]  # the callback already reads the committed rows
    store.insert_run({"id": "b", "created_at": 2.0, "status": "running", "module": "m.wasm",
                      "request": {}}).result(5)
    store.finish_run("b", {"status": "finished", "outcome": "exited", "exit_code": 0,
                           "result": {"stdout": "ok"}}, rows(0, 0)[0]).result(5)
    store.close()  # "a" is still running: as if the service died

    again = RunStore(tmp_path)
    assert again.interrupted == ["a"]
    a = again.get_run("a")
    assert a is not None and (a["status"], a["outcome"]) == ("interrupted", "interrupted")
    last = again.events("a")[-1]
    assert last[0] == 3 and json.loads(last[2])["outcome"] == "interrupted"
    b = again.get_run("b")
    assert b is not None and b["result"] == {"stdout": "ok"} and b["status"] == "finished"
    assert [r["id"] for r in again.list_runs(10)[0]] == ["b", "a"]
    assert [r["id"] for r in again.list_runs(10, before=2.0)[0]] == ["a"]
    assert again.events("a", after=0, before=2) == rows(1, 1)
    again.close()
