"""The journal's flusher thread (journal/_flusher.py) in a forked child: a
worker forked while another thread of its parent was handing a write to
the flusher must still be able to hand its own. Real parts: os.fork, a
journal writer on a real file in the child."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

from spearpy.journal import FileJournalStore, SyncPolicy
from spearpy.journal._flusher import FLUSHER
from spearpy.journal.writer import JournalWriter

HUNG = 3  # the child's exit status when its hand-over hung


def test_a_child_forked_while_a_write_was_handed_over_hands_over_its_own(
        tmp_path: Path) -> None:
    FLUSHER.soon(lambda: None)  # the parent's flusher thread exists
    holding, release = threading.Event(), threading.Event()

    def hand_over() -> None:
        # Another run's thread inside FLUSHER.soon at the fork: the flusher's
        # lock is held, and the child gets a copy of it held by no thread.
        with FLUSHER._cond:
            holding.set()
            release.wait()

    other = threading.Thread(target=hand_over)
    other.start()
    holding.wait()
    pid = os.fork()
    if pid == 0:  # the child: only os._exit leaves it
        status = 1
        try:
            signal.signal(signal.SIGALRM, lambda *_: os._exit(HUNG))
            signal.alarm(10)  # against a hang only
            store = FileJournalStore(tmp_path)
            writer = JournalWriter.open(store, "child", buffered=True, sync=SyncPolicy.NONE)
            writer.start(module=b"m", argv=[], env=[], stdin=b"", limits={}, flags={})
            writer.append_hostcall("system.random_i64", (), 7, [], 0.0)
            written = threading.Event()
            FLUSHER.soon(writer.flush_soon)
            FLUSHER.soon(written.set)
            written.wait()
            writer.close()
            status = 0 if len(list(store.records("child"))) == 2 else 2
        finally:
            os._exit(status)
    release.set()
    other.join()
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


# Run in a process of its own: it caps its address space just above what it
# maps and asks 1 GiB of stack for each new thread, so the flusher's thread
# cannot start (as tests/test_parallel_limits.py's child); then a record is
# made (a buffered writer arms its max_wait) and handed to the flusher.
_NO_THREADS_CHILD = """
import json, sys
from spearpy.journal import FileJournalStore, SyncPolicy
from spearpy.journal.writer import JournalWriter
from tests.thread_room import use_up_thread_room

store = FileJournalStore(sys.argv[1])
writer = JournalWriter.open(store, "run", buffered=True, sync=SyncPolicy.NONE)
writer.start(module=b"m", argv=[], env=[], stdin=b"", limits={}, flags={})
writer.flush()
writer.max_wait = 0.05  # armed by the next record: no flusher thread started so far
report = {"thread_started": use_up_thread_room()}
try:
    writer.append_hostcall("system.random_i64", (), 1, [], 0.0)
    writer.flush_soon()  # the guest is about to wait
    report["written"] = len(list(store.records("run")))
    writer.append_hostcall("system.random_i64", (), 2, [], 0.0)
    writer.close()
    report["closed"] = len(list(store.records("run")))
except BaseException as exc:
    report["error"] = f"{type(exc).__name__}: {exc}"[:2000]
print(json.dumps(report))
"""


def test_a_process_that_cannot_start_the_flusher_writes_on_the_runs_thread(
        tmp_path: Path) -> None:
    """At the process's thread limit a record is still made (its max_wait
    not armed) and a write handed over before a wait is made at once, on
    the caller's thread, instead of the error escaping into the hostcall."""
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        p for p in (str(root), os.environ.get("PYTHONPATH")) if p)}
    child = subprocess.run([sys.executable, "-c", _NO_THREADS_CHILD, str(tmp_path)],
                           capture_output=True, text=True, cwd=root, env=env, timeout=120)
    assert child.returncode == 0, child.stderr[-3000:]
    report = json.loads(child.stdout.splitlines()[-1])
    assert report["thread_started"] is False  # the limit binds this process
    assert report == {"thread_started": False, "written": 2, "closed": 3}, report
