"""Every read of stored data is paged and bounded (issue 29, hole 1).

Replaying a finished run used to read all of its events from the store at
once and keep the list while the SSE stream was open: 20 slow subscribers of
a ~50k-event run took the service from 175 MB to 844 MB. The run list read
every listed run's output (up to 64 MiB each of stdout and stderr) to show
its usage. The attacks run against a real `spearpy serve` process under
RLIMIT_DATA, whose memory is read from /proc.
"""

from __future__ import annotations

import asyncio
import json
import resource
import socket
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest

from spearpy.serve import BackgroundServer, ServeConfig, create_app
from spearpy.serve.fanout import Channel, follow
from spearpy.serve.store import PAGE_EVENT_BYTES, PAGE_EVENTS, EventRow, RunStore
from tests.test_serve_api import ROOT, sse_events
from tests.test_serve_store import append_committed

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="/proc/PID/status, RLIMIT_DATA")

RUN = "0123456789abcdef"
EVENTS = 50_000
SUBSCRIBERS = 20
# Python, uvicorn, SQLite's per-thread caches and 20 connections' pages fit
# easily; 20 copies of the run's events (~30 MB each) do not.
SUBSCRIBERS_MAX_GROWTH = 64 << 20
# The service's address space may not pass this: a regression fails the
# test, not the machine the suite shares.
RLIMIT_DATA = 1 << 30


def _record(seq: int, kind: str) -> str:
    return json.dumps({"kind": kind, "run_id": "3ddd4c5fe06a", "seq": seq, "ts": 1795566662.6,
                       "fd": 1000, "tool_call_id": f"call_{seq}", "name": "add",
                       "source": "guest", "output": "x" * 400}, separators=(",", ":"))


def _finished_run(store: RunStore, run_id: str, created_at: float, events: int,
                  stdout: str = "", request: dict[str, object] | None = None) -> None:
    store.insert_run({"id": run_id, "created_at": created_at, "status": "running",
                      "module": "m.wasm", "request": request or {"args": []}}).result(30)
    for first in range(0, events - 1, 5000):
        rows = [(seq, "tool_end", _record(seq, "tool_end"))
                for seq in range(first, min(first + 5000, events - 1))]
        append_committed(store, run_id, rows)
    end = (events - 1, "run_end", _record(events - 1, "run_end"))
    store.finish_run(run_id, {"status": "finished", "ended_at": created_at + 1,
                              "outcome": "exited", "exit_code": 0,
                              "result": {"usage": {"total_tokens": 7}, "elapsed_ms": 12.5,
                                         "stdout": stdout, "stderr": "", "transcripts": []}},
                     end).result(30)


def _memory(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM (the peak) of a process, in bytes."""
    fields: dict[str, int] = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in ("VmRSS", "VmHWM"):
            fields[name] = int(value.split()[0]) << 10
    return fields


def _limit_data() -> None:
    resource.setrlimit(resource.RLIMIT_DATA, (RLIMIT_DATA, RLIMIT_DATA))


Service = tuple[subprocess.Popen[str], str]  # the process, its base URL


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Callable[[], Service]]:
    """Starts `spearpy serve` on the state in tmp_path/state, under RLIMIT_DATA."""
    started: list[subprocess.Popen[str]] = []
    (tmp_path / "modules").mkdir()

    def start() -> Service:
        proc = subprocess.Popen(
            [sys.executable, "-m", "spearpy.serve", "--port", "0", "--no-cache",
             "--no-access-log", "--executor", "threads", "--modules", str(tmp_path / "modules"),
             "--state-dir", str(tmp_path / "state")],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=ROOT,
            preexec_fn=_limit_data)
        started.append(proc)
        assert proc.stderr is not None
        seen = []
        for line in proc.stderr:
            seen.append(line)
            if "listening on " in line:
                # Keep draining stderr so the service never blocks on a full pipe.
                threading.Thread(target=proc.stderr.read, daemon=True).start()
                return proc, line.split("listening on ")[1].strip().rstrip("/")
        raise AssertionError(f"the service did not start: {''.join(seen)}")

    yield start
    for proc in started:
        proc.kill()
        proc.wait()


def _stalled_subscriber(url: str, path: str) -> socket.socket:
    """An SSE client that reads the first event, then nothing more."""
    where = urlsplit(url)
    client = socket.socket()
    client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    client.settimeout(30)
    client.connect((where.hostname, where.port))
    client.sendall(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
    seen = b""
    while b"id: 0\n" not in seen:
        chunk = client.recv(4096)
        assert chunk, seen
        seen += chunk
    return client


def test_slow_subscribers_replaying_a_long_run_hold_a_page_each(
        tmp_path: Path, serve: Callable[[], Service]) -> None:
    store = RunStore(tmp_path / "state")
    _finished_run(store, RUN, 1.0, EVENTS)
    store.close()
    proc, url = serve()
    path = f"/v1/runs/{RUN}/events"
    with httpx.Client(base_url=url, timeout=60) as client:
        # A whole replay, fast: every event once, in order (and the service warm).
        with client.stream("GET", path) as response:
            assert [seq for seq, _record in sse_events(response)] == list(range(EVENTS))
        before = _memory(proc.pid)["VmRSS"]
        subscribers = [_stalled_subscriber(url, path) for _ in range(SUBSCRIBERS)]
        try:
            threading.Event().wait(1.0)  # the service's reads, had they been whole, are done
            grown = _memory(proc.pid)["VmHWM"] - before
            assert client.get("/healthz").status_code == 200
        finally:
            for subscriber in subscribers:
                subscriber.close()
    assert grown < SUBSCRIBERS_MAX_GROWTH, \
        f"{SUBSCRIBERS} stalled subscribers took {grown >> 20} MiB"


def test_listing_runs_reads_none_of_their_output(
        tmp_path: Path, serve: Callable[[], Service]) -> None:
    big = "y" * (8 << 20)
    store = RunStore(tmp_path / "state")
    for n in range(10):
        _finished_run(store, f"run{n:013d}", 10.0 + n, 2, stdout=big)
    store.close()
    proc, url = serve()
    with httpx.Client(base_url=url, timeout=60) as client:
        before = _memory(proc.pid)["VmRSS"]
        pages = [client.get("/v1/runs", params={"limit": 10}).json() for _ in range(3)]
        grown = _memory(proc.pid)["VmHWM"] - before
        # 80 MiB of output, read and parsed, would be well over this.
        assert grown < 32 << 20, f"listing 10 runs took {grown >> 20} MiB"
        for listed in pages:
            assert len(listed["runs"]) == 10 and listed["next"] is None
            assert all(run["usage"] == {"total_tokens": 7} and run["elapsed_ms"] == 12.5
                       for run in listed["runs"])
        # The run itself still has all of it.
        assert client.get("/v1/runs/run0000000000003").json()["stdout"] == big


def test_a_runs_page_is_bounded_in_bytes_and_its_next_keeps_the_filter(
        tmp_path: Path) -> None:
    store = RunStore(tmp_path / "state")
    args = ["z" * (1 << 20)]  # a request body's worth of args, kept in the record
    for n in range(10):
        _finished_run(store, f"big{n:013d}", 100.0 + n, 2, request={"args": args})
    # Left running: the service marks it interrupted at start, between the
    # pages: a `next` that drops the filter lists it.
    store.insert_run({"id": "running000000000", "created_at": 104.5, "status": "running",
                      "module": "m.wasm", "request": {"args": []}}).result(30)
    store.close()
    (tmp_path / "modules").mkdir()
    config = ServeConfig(modules_dir=tmp_path / "modules", state_dir=tmp_path / "state")
    with BackgroundServer(create_app(config)) as server, \
            httpx.Client(base_url=server.url, timeout=60) as client:
        seen: list[str] = []
        pages = 0
        url: str | None = "/v1/runs?limit=500&status=finished"
        while url is not None:
            reply = client.get(url)
            assert reply.status_code == 200
            page = reply.json()
            assert len(reply.content) < 6 << 20, "a page passed its byte bound"
            assert all(run["status"] == "finished" for run in page["runs"])
            seen += [run["id"] for run in page["runs"]]
            url = page["next"]
            pages += 1
        assert seen == [f"big{n:013d}" for n in range(9, -1, -1)]
        assert pages > 1


def test_a_subscriber_behind_the_buffer_skips_events_the_store_never_took(
        tmp_path: Path) -> None:
    """Events whose writes the disk refused still reach live subscribers
    from the buffer; one behind the buffer used to ask the store for them
    again and again, forever."""
    store = RunStore(tmp_path)
    rows: list[EventRow] = [(seq, "tool_end", _record(seq, "tool_end")) for seq in range(10)]

    async def read_store(after: int, before: int | None) -> list[EventRow]:
        return await asyncio.to_thread(store.events, "never-stored", after, before)

    async def replay() -> list[int]:
        channel = Channel(buffer=4)
        channel.publish(rows, ended=True)  # none of them committed
        return [row[0] async for row in follow(channel, read_store, -1, keepalive=0.05)
                if row is not None]

    try:
        assert asyncio.run(asyncio.wait_for(replay(), 10)) == [6, 7, 8, 9]
    finally:
        store.close()


def test_the_store_hands_out_events_a_bounded_page_at_a_time(tmp_path: Path) -> None:
    store = RunStore(tmp_path)
    _finished_run(store, RUN, 1.0, 3 * PAGE_EVENTS)
    wide = "w" * (PAGE_EVENT_BYTES // 2)
    store.insert_run({"id": "wide", "created_at": 2.0, "status": "running",
                      "module": "m.wasm", "request": {}}).result(30)
    append_committed(store, "wide", [(seq, "tool_end", wide) for seq in range(6)])
    try:
        page = store.events(RUN)
        assert [row[0] for row in page] == list(range(PAGE_EVENTS))
        assert store.events(RUN, PAGE_EVENTS - 1)[0][0] == PAGE_EVENTS
        assert [row[0] for row in store.events("wide")] == [0, 1]
        assert [row[0] for row in store.events("wide", 1)] == [2, 3]
        assert store.events("wide", 5) == []
    finally:
        store.close()


def test_a_state_directory_from_before_summaries_still_lists_usage(tmp_path: Path) -> None:
    tmp_path.joinpath("state").mkdir()
    db = sqlite3.connect(tmp_path / "state" / "runs.sqlite3")
    db.executescript("""
        CREATE TABLE runs (
            id TEXT PRIMARY KEY, created_at REAL NOT NULL, ended_at REAL, status TEXT NOT NULL,
            module TEXT NOT NULL, sha256 TEXT, request TEXT NOT NULL, outcome TEXT,
            exit_code INTEGER, message TEXT, host_run_id TEXT, cancel_reason TEXT, result TEXT);
        CREATE TABLE events (
            run_id TEXT NOT NULL, seq INTEGER NOT NULL, kind TEXT NOT NULL,
            record TEXT NOT NULL, PRIMARY KEY (run_id, seq)) WITHOUT ROWID;""")
    result = {"usage": {"total_tokens": 3}, "elapsed_ms": 4.0, "stdout": "old", "stderr": "",
              "transcripts": []}
    db.execute("INSERT INTO runs VALUES ('old', 1.0, 2.0, 'finished', 'm.wasm', NULL, '{}', "
               "'exited', 0, '', NULL, NULL, ?)", (json.dumps(result),))
    db.commit()
    db.close()
    store = RunStore(tmp_path / "state")
    try:
        runs, more = store.list_runs(10)
        assert not more
        assert [(r["id"], r["result"]) for r in runs] == \
            [("old", {"usage": {"total_tokens": 3}, "elapsed_ms": 4.0})]
        old = store.get_run("old")
        assert old is not None and old["result"] == result
        store.insert_run({"id": "new", "created_at": 3.0, "status": "running",
                          "module": "m.wasm", "request": {}}).result(30)
        assert [r["id"] for r in store.list_runs(10)[0]] == ["new", "old"]
    finally:
        store.close()
