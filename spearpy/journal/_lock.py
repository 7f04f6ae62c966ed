"""An exclusive, non-blocking lock on a file (flock): the kernel drops it
when its holder dies, so a crashed writer never keeps a journal locked."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from spearpy.journal.errors import JournalBusy


def lock_fd(fd: int, what: str) -> None:
    """Lock an open file; JournalBusy if another open file holds it (this
    process's included: flock locks belong to the open file, not the process)."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        raise JournalBusy(f"{what} is open for writing elsewhere (another run or "
                          f"process holds its lock); two writers would interleave") from None


class LockFile:
    """A lock file of its own, removed on release.

    Removing it is safe because a locker checks, once it holds the lock, that
    the path still names the file it locked: one that lost the race to a
    release locked a removed file and tries again."""

    def __init__(self, path: Path, what: str) -> None:
        self.path = path
        while True:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            try:
                lock_fd(fd, what)
                held = os.fstat(fd)
                try:
                    current = os.stat(path)
                except FileNotFoundError:
                    current = None
            except BaseException:
                os.close(fd)
                raise
            if current is not None and (current.st_ino, current.st_dev) == \
                    (held.st_ino, held.st_dev):
                self._fd: int | None = fd
                return
            os.close(fd)

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is None:
            return
        try:
            self.path.unlink(missing_ok=True)
        finally:
            os.close(fd)
