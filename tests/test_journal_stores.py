"""The three journal stores behind one interface, each attacked the same way:
two writers on one journal, a writer that dies holding it, threads sharing a
writer, the byte cap's edge, secrets in the stored bytes, a 100k-step journal
read in bounded memory. PostgreSQL is a real server (tests/pg_server.py)."""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from spearpy.journal import (
    JournalBusy,
    JournalError,
    JournalFull,
    JournalInfo,
    JournalStore,
    JournalWriter,
    Step,
    SyncPolicy,
    encode,
    open_store,
)
from spearpy.journal.records import Start, hostcall_answer, hostcall_writes, make_step
from spearpy.observe.scrub import SecretScrubber
from tests import pg_server

ROOT = Path(__file__).resolve().parent.parent
STORES = ["file", "sqlite", "postgres"]
KEY = "sk-proj-Hq2LmV8xR4tN7wK1"
RANDOM = {"call": "system.random_i64", "args": []}


def _random(n: int) -> dict[str, object]:
    return hostcall_answer(n, [], 0.0, SecretScrubber())


def _rcs(store: JournalStore) -> list[int]:
    return [r.answer["rc"] for r in store.records("run") if isinstance(r, Step)]


@pytest.fixture(scope="module")
def pg_url() -> Iterator[str]:
    reason = pg_server.unavailable()
    if reason is not None:
        pytest.skip(reason)
    with pg_server.running() as url:
        yield url


@pytest.fixture(params=STORES)
def spec(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Where a store lives, as `open_store` takes it (another process opens it too)."""
    if request.param == "file":
        return str(tmp_path / "journals")
    if request.param == "sqlite":
        return str(tmp_path / "state" / "journals.sqlite3")
    url: str = request.getfixturevalue("pg_url")
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:  # each test starts empty
        conn.execute("DROP TABLE IF EXISTS spearpy_journal_steps, spearpy_journals")
    return url


@pytest.fixture
def store(spec: str) -> Iterator[JournalStore]:
    with open_store(spec) as opened:
        yield opened


def _started(store: JournalStore, journal_id: str = "run", **kwargs: object) -> JournalWriter:
    journal = JournalWriter.open(store, journal_id, **kwargs)  # type: ignore[arg-type]
    journal.start(module=b"m", argv=["a"], env=[], stdin=b"", limits={}, flags={})
    return journal


def test_records_round_trip_and_a_reopened_writer_goes_on(store: JournalStore) -> None:
    from tests.test_journal_records import SAMPLES

    with _started(store) as journal:
        sizes = [journal.append(kind, *SAMPLES[kind]) for kind in sorted(SAMPLES)]
        used = journal.bytes_used
    with JournalWriter.open(store, "run") as journal:
        assert (journal.next_seq, journal.bytes_used) == (len(SAMPLES) + 1, used)
        journal.end("exited", 0)
    records = list(store.records("run"))
    steps = [r for r in records if isinstance(r, Step)]
    assert [s.kind for s in steps] == sorted(SAMPLES)
    assert [len(encode(s)) + 1 for s in steps] == sizes
    assert steps == [make_step(i + 1, k, *SAMPLES[k], SecretScrubber())
                     for i, k in enumerate(sorted(SAMPLES))]
    assert records[-1].kind == "end"
    assert [(j.id, j.ended) for j in store.list()] == [("run", True)]
    with pytest.raises(JournalError, match="has ended"):
        JournalWriter.open(store, "run")


def test_a_second_writer_is_refused(store: JournalStore) -> None:
    first = _started(store)
    with pytest.raises(JournalBusy, match="open for writing elsewhere"):
        JournalWriter.open(store, "run")
    other = _started(store, "other")  # another journal is not held
    other.close()
    first.append("hostcall", RANDOM, _random(1))
    first.close()
    with JournalWriter.open(store, "run") as again:
        again.append("hostcall", RANDOM, _random(2))
    assert _rcs(store) == [1, 2]


def test_a_writer_in_another_process_is_refused_and_its_crash_frees_the_journal(
        spec: str, store: JournalStore) -> None:
    script = textwrap.dedent(f"""
        import sys, time
        sys.path.insert(0, {str(ROOT)!r})
        from spearpy.journal import JournalWriter, open_store
        from spearpy.journal.records import hostcall_answer
        journal = JournalWriter.open(open_store(sys.argv[1]), "run")
        journal.start(module=b"m", argv=[], env=[], stdin=b"", limits={{}}, flags={{}})
        journal.append("hostcall", {RANDOM!r}, hostcall_answer(7, [], 0.0, journal.scrubber))
        print("holding", flush=True)
        time.sleep(600)
    """)
    holder = subprocess.Popen([sys.executable, "-c", script, spec], stdout=subprocess.PIPE,
                              text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "holding\n"
        with pytest.raises(JournalBusy):
            JournalWriter.open(store, "run")
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=30)
    # The kernel (flock) or the server (a dropped session's advisory lock) frees
    # it; the server notices the closed socket at once, the wait is for a loaded box.
    deadline = time.monotonic() + 20
    while True:
        try:
            journal = JournalWriter.open(store, "run")
            break
        except JournalBusy:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
    with journal:
        assert journal.next_seq == 2
        journal.append("hostcall", RANDOM, _random(8))
    assert _rcs(store) == [7, 8]


def test_threads_sharing_a_writer_never_interleave(store: JournalStore) -> None:
    journal = _started(store)
    per_thread = 50

    def work(n: int) -> None:
        for i in range(per_thread):
            journal.append("tool.outcome", None, {"thread": n, "i": i, "pad": "y" * 300})

    threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    journal.close()
    steps = [r for r in store.records("run") if isinstance(r, Step)]  # seqs checked on read
    assert len(steps) == 4 * per_thread
    for n in range(4):
        assert [s.answer["i"] for s in steps if s.answer["thread"] == n] == list(range(per_thread))


@pytest.mark.parametrize("slack", [-1, 0, 1])
def test_journal_full_at_the_cap_edge(store: JournalStore, slack: int) -> None:
    """Cap one below, at, and one above what the next step needs."""
    with _started(store) as probe:
        size = len(encode(make_step(1, "tool.outcome", None, {"t": "x" * 100},
                                    SecretScrubber()))) + 1
        cap = probe.bytes_used + size + slack
    with JournalWriter.open(store, "run", max_bytes=cap) as journal:
        if slack < 0:
            with pytest.raises(JournalFull, match=f"step 1 \\(tool.outcome, {size} bytes\\) "
                                                  f"would take it to {cap + 1} bytes"):
                journal.append("tool.outcome", None, {"t": "x" * 100})
            assert journal.next_seq == 1  # nothing of it stored
        else:
            assert journal.append("tool.outcome", None, {"t": "x" * 100}) == size
            assert journal.bytes_used == cap - slack
            with pytest.raises(JournalFull):
                journal.append("hostcall", RANDOM, _random(1))
        journal.end("memory_limit", 137)  # the end is written even when full
    kinds = [r.kind for r in store.records("run")]
    assert kinds == ["start", *(["tool.outcome"] if slack >= 0 else []), "end"]


def test_secrets_never_reach_the_stored_bytes(spec: str, store: JournalStore) -> None:
    with _started(store, secrets=[KEY]) as journal:
        journal.append("chat.completion", {"k": KEY}, {
            "error": {"message": f"Incorrect API key provided: {KEY}"},
            "choices": [{"message": {"content": f"your key is {KEY}"}}]})
        journal.append("tool.outcome", {"source": "python", "name": "env", "arguments": {}},
                       {"ok": True, "output": f"KEY={KEY}"})
        journal.append("hostcall", {"call": "user_streams.user_stream_read",
                                    "args": [3, 4096, 64]},
                       hostcall_answer(len(KEY), [(4096, KEY.encode())], 2.0, journal.scrubber))
    for blob in _stored_bytes(spec):
        assert KEY.encode() not in blob
    steps = [r for r in store.records("run") if isinstance(r, Step)]
    assert steps[1].answer["output"] == "KEY=[redacted]"
    [(_, written)] = hostcall_writes(steps[2].answer)  # base64 would hide it from the check
    assert KEY.encode() not in written and len(written) == len(KEY)


def _stored_bytes(spec: str) -> list[bytes]:
    """Everything the store keeps, as the disk or the server holds it."""
    if spec.startswith("postgresql://"):
        import psycopg

        with psycopg.connect(spec) as conn:
            rows = conn.execute("SELECT record FROM spearpy_journal_steps").fetchall()
        blobs = [row[0].encode() for row in rows]
    else:
        root = Path(spec)
        files = [root.parent / n for n in os.listdir(root.parent) if n.startswith(root.name)] \
            if root.suffix == ".sqlite3" else list(root.iterdir())
        blobs = [f.read_bytes() for f in files if f.is_file()]
    assert blobs
    return blobs + [json.dumps(blob.decode("latin-1")).encode() for blob in blobs]


@pytest.mark.parametrize("sync", list(SyncPolicy))
def test_every_sync_policy(store: JournalStore, sync: SyncPolicy) -> None:
    with _started(store, sync=sync) as journal:
        journal.append("hostcall", RANDOM, _random(1))
        journal.sync()
        journal.append("hostcall", RANDOM, _random(2))
        journal.end("exited", 0)
    assert [r.kind for r in store.records("run")] == ["start", "hostcall", "hostcall", "end"]
    assert _rcs(store) == [1, 2]


def test_a_missing_journal_is_a_clear_error(store: JournalStore) -> None:
    with pytest.raises(JournalError, match="no journal"):
        list(store.records("nothing-here"))


# ---- 100k steps, read in bounded memory ---------------------------------------------------

STEPS = 100_000
PAD = 450  # written as 600 base64 characters: ~750 bytes a line, a ~75 MB journal
RLIMIT_DATA = 768 << 20
GROWTH_LIMIT_KIB = 32 << 10  # a page is 1 MiB; holding the journal would take 70+ MB


def _fill(spec: str, store: JournalStore) -> None:
    """A 100k-step journal, written in bulk (the writer's path is tested above)."""
    start = Start.of_run(module=b"m", argv=[], env=[], stdin=b"", limits={}, flags={},
                         scrubber=SecretScrubber())
    scrub = SecretScrubber()
    lines = [encode(start)] + [
        encode(make_step(i, "hostcall", {"call": "mic.mic_read", "args": [4, 4096, PAD]},
                         hostcall_answer(i, [(4096, b"z" * PAD)], float(i), scrub), scrub))
        for i in range(1, STEPS + 1)]
    if spec.startswith("postgresql://"):
        import psycopg

        JournalWriter.open(store, "big").close()  # the tables and the journal's row
        with psycopg.connect(spec) as conn, conn.cursor() as cur, cur.copy(
                "COPY spearpy_journal_steps (journal_id, seq, kind, record) FROM STDIN") as copy:
            for seq, line in enumerate(lines):
                copy.write_row(("big", seq, "start" if seq == 0 else "hostcall",
                                line.decode()))
    elif spec.endswith(".sqlite3"):
        import sqlite3

        JournalWriter.open(store, "big").close()
        with sqlite3.connect(spec) as db:
            db.executemany("INSERT INTO journal_steps VALUES ('big', ?, ?, ?)",
                             [(seq, "start" if seq == 0 else "hostcall", line.decode())
                              for seq, line in enumerate(lines)])
    else:
        Path(spec).mkdir(parents=True, exist_ok=True)
        (Path(spec) / "big.jsonl").write_bytes(b"\n".join(lines) + b"\n")


_READ_BIG = textwrap.dedent("""
    import json, resource, sys
    sys.path.insert(0, sys.argv[3])
    from spearpy.journal import JournalReader, open_store
    from spearpy.journal.records import hostcall_writes
    def rss(field):
        with open("/proc/self/status") as status:
            return next(int(l.split()[1]) for l in status if l.startswith(field))
    resource.setrlimit(resource.RLIMIT_DATA, (int(sys.argv[2]), int(sys.argv[2])))
    store = open_store(sys.argv[1])
    base = rss("VmRSS:")
    reader = JournalReader(store, "big")
    n = 0
    while not reader.exhausted:
        n += 1
        answer = reader.next_answer("hostcall", {"call": "mic.mic_read",
                                                 "args": [4, 4096, int(sys.argv[4])]})
        assert answer["rc"] == n and hostcall_writes(answer)[0][1][:1] == b"z"
    print(json.dumps({"steps": n, "base_kib": base, "peak_kib": rss("VmHWM:")}))
""")


@pytest.mark.skipif(sys.platform != "linux", reason="RLIMIT_DATA and /proc/self/status")
def test_a_100k_step_journal_is_read_in_bounded_memory(spec: str, store: JournalStore) -> None:
    _fill(spec, store)
    done = subprocess.run([sys.executable, "-c", _READ_BIG, spec, str(RLIMIT_DATA), str(ROOT),
                           str(PAD)],
                          capture_output=True, text=True, timeout=600, check=False,
                          preexec_fn=lambda: resource.setrlimit(
                              resource.RLIMIT_CORE, (0, 0)))
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout)
    assert report["steps"] == STEPS
    assert report["peak_kib"] - report["base_kib"] < GROWTH_LIMIT_KIB, report


def test_one_journal_is_looked_up_by_its_id(store: JournalStore) -> None:
    assert store.info("run") is None
    writer = _started(store)
    assert store.info("run") == JournalInfo("run", False)
    writer.end("exited", 0)
    writer.close()
    assert store.info("run") == JournalInfo("run", True)
    assert store.info("other") is None and [i.id for i in store.list()] == ["run"]
