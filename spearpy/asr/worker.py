"""What feeds an rtasr fd from a daemon thread of its own (the realtime
connection, the stub transport): started by connect, stopped by the fd's
close, and `alive` until its thread has finished."""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from spearpy.fds.rtasr import RtAsrFd


class ThreadWorker(ABC):
    def __init__(self, fd: RtAsrFd, name: str) -> None:
        self._fd = fd
        self._stopping = threading.Event()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._main, name=name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    @property
    def alive(self) -> bool:
        return not self._done.is_set()

    def stop(self, flush: bool) -> None:
        self._stopping.set()

    def _main(self) -> None:
        try:
            self._run()
        finally:
            self._done.set()
            self._fd.waker.wake()  # can_change() is now False: an infinite wait may end

    @abstractmethod
    def _run(self) -> None:
        """The thread's work; returning ends the worker."""
