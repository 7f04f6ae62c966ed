"""The journal's flusher thread (journal/_flusher.py) in a forked child: a
worker forked while another thread of its parent was handing a write to
the flusher must still be able to hand its own. Real parts: os.fork, a
journal writer on a real file in the child."""

from __future__ import annotations

import os
import signal
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
