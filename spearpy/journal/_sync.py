"""A journal file's fdatasync on a worker thread, off the run's path.

Policy `send` makes a journal durable when a send completes. The run need
not wait there: what must hold is that the records are durable before the
run makes its next paid call, so the writer starts the sync when the send
ends (`begin`) and waits for it before the next paid call (`wait`), and the
flush overlaps with whatever the guest does in between. fdatasync releases
the GIL, so the guest's thread runs meanwhile.
"""

from __future__ import annotations

import os
import threading

from spearpy.journal.errors import JournalError


class BackgroundSync:
    """fdatasync(fd) on a daemon thread of its own, as often as asked; each
    `wait` returns once every sync asked for before it is done."""

    def __init__(self, fd: int, name: str) -> None:
        self._fd = fd
        self._name = name
        self._cond = threading.Condition()
        self._asked = 0  # syncs asked for
        self._done = 0  # the asked count the last finished sync covered
        self._error: OSError | None = None
        self._stopping = False
        self._thread = threading.Thread(target=self._loop, name="spearpy-journal-sync",
                                        daemon=True)
        self._thread.start()

    def begin(self) -> None:
        with self._cond:
            self._asked += 1
            self._cond.notify_all()

    def wait(self) -> None:
        """JournalError when a sync asked for failed (raised once)."""
        if self._done >= self._asked and self._error is None:
            # Nothing outstanding (the common case at a paid call): no lock.
            # `_asked` is only changed by the waiting thread, and a stale
            # `_done` only sends this to the locked path.
            return
        with self._cond:
            while self._done < self._asked and self._thread.is_alive():
                self._cond.wait()
            error, self._error = self._error, None
        if error is not None:
            raise JournalError(f"cannot sync journal {self._name!r}: {error.strerror}") \
                from error

    def stop(self) -> None:
        """Wait for what was asked, then end the thread (the fd stays open)."""
        try:
            self.wait()
        finally:
            with self._cond:
                self._stopping = True
                self._cond.notify_all()
            self._thread.join()

    def _loop(self) -> None:
        cond = self._cond
        while True:
            with cond:
                while self._done >= self._asked and not self._stopping:
                    cond.wait()
                if self._done >= self._asked:
                    return
                target = self._asked
            error: OSError | None = None
            try:
                os.fdatasync(self._fd)
            except OSError as exc:
                error = exc
            with cond:
                if error is not None:
                    self._error = error  # before `_done`, which wait's fast path reads
                self._done = target
                cond.notify_all()
