"""Capturing a guest's stdout and stderr with a bound on memory and disk.

wasmtime writes a captured stream to a path we give it (not to Python
callbacks: wasmtime-py's custom-output callbacks can abort the interpreter at
exit). A plain file there grows as fast as the guest prints: half a gigabyte
a second, without end when the run has no deadline. So the path is a FIFO and
one thread per process (epoll over every run's FIFOs) drains it, keeping the
first `MAX_CAPTURE_BYTES` of each stream and discarding the rest; the guest
never blocks for long, and nothing reaches the disk. Where FIFOs do not exist, plain files remain.
"""

from __future__ import annotations

import contextlib
import os
import select
import threading
from pathlib import Path

# Captured output is kept in memory; a guest printing forever must not take
# the host down with it.
MAX_CAPTURE_BYTES = 64 << 20
_CHUNK = 1 << 16


class Capture:
    """The first MAX_CAPTURE_BYTES written, and whether more was dropped."""

    def __init__(self) -> None:
        self.data = bytearray()
        self.truncated = False

    def write(self, chunk: bytes) -> int:
        room = MAX_CAPTURE_BYTES - len(self.data)
        if room > 0:
            self.data += chunk[:room]
        if len(chunk) > room:
            self.truncated = True
        return len(chunk)


class _Drainer:
    """One thread per process drains every run's FIFOs (epoll): starting and
    joining a thread per run cost ~0.1 ms CPU and, on a busy machine, ~2 ms
    of waiting for the new thread to be scheduled before the guest started."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # held while a FIFO is read: finish() waits for it
        self._owners: dict[int, OutputCapture] = {}
        self._pid = -1
        self._epoll: select.epoll | None = None

    def add(self, fd: int, owner: OutputCapture) -> None:
        with self._lock:
            if self._pid != os.getpid():  # first use, or a forked child: its own
                self._pid = os.getpid()
                self._owners = {}
                self._epoll = select.epoll()
                threading.Thread(target=self._run, args=(self._epoll,),
                                 name="spearpy-capture", daemon=True).start()
            assert self._epoll is not None
            self._owners[fd] = owner
            self._epoll.register(fd, select.EPOLLIN)

    def remove(self, fd: int) -> None:
        with self._lock:
            if self._owners.pop(fd, None) is not None and self._epoll is not None:
                with contextlib.suppress(OSError):
                    self._epoll.unregister(fd)

    def _run(self, epoll: select.epoll) -> None:
        while True:
            for fd, _mask in epoll.poll():
                with self._lock:
                    owner = self._owners.get(fd)
                    # A few reads per wake-up: the lock is every run's, and a
                    # guest printing as fast as it can must not keep it (the
                    # descriptor stays ready and comes round again).
                    if owner is not None and not owner.read_available(fd, _CHUNKS_PER_WAKE):
                        del self._owners[fd]  # the writer closed its end
                        with contextlib.suppress(OSError):
                            epoll.unregister(fd)


_CHUNKS_PER_WAKE = 16  # 1 MiB
_DRAINER = _Drainer() if hasattr(select, "epoll") else None


class OutputCapture:
    """Paths for wasmtime to write a run's streams to, and what was written.

    `paths()` before the WASI config is built; `finish()` once the guest is
    done, returning {name: Capture} of the guest's own bytes.
    """

    def __init__(self, scratch: Path, names: tuple[str, ...] = ("stdout", "stderr")) -> None:
        self._paths = {name: scratch / name for name in names}
        self._captures = {name: Capture() for name in names}
        self._fds: dict[int, str] = {}
        if hasattr(os, "mkfifo") and _DRAINER is not None:
            for name, path in self._paths.items():
                os.mkfifo(path, 0o600)
                # Non-blocking: opening a FIFO's read end would otherwise wait
                # for a writer, and wasmtime's open would wait for a reader.
                fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
                self._fds[fd] = name
                _DRAINER.add(fd, self)

    def paths(self) -> dict[str, Path]:
        return dict(self._paths)

    def read_available(self, fd: int, chunks: int | None = None) -> bool:
        """Read what is there (at most `chunks` reads); False once the writer
        has closed its end."""
        capture = self._captures[self._fds[fd]]
        reads = 0
        while chunks is None or reads < chunks:
            reads += 1
            try:
                chunk = os.read(fd, _CHUNK)
            except BlockingIOError:
                return True
            if not chunk:
                return False
            capture.write(chunk)
        return True

    def finish(self) -> dict[str, Capture]:
        if self._fds:
            assert _DRAINER is not None
            for fd in self._fds:
                _DRAINER.remove(fd)  # after this the drainer never reads it again
                with contextlib.suppress(OSError):
                    self.read_available(fd)  # what arrived after its last read
                os.close(fd)
            self._fds.clear()
            return self._captures
        for name, path in self._paths.items():
            capture = self._captures[name]
            with contextlib.suppress(OSError), path.open("rb") as handle:
                data = handle.read(MAX_CAPTURE_BYTES + 1)
                capture.write(data)
        return self._captures
