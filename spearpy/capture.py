"""Capturing a guest's stdout and stderr with a bound on memory and disk.

wasmtime writes a captured stream to a path we give it (not to Python
callbacks: wasmtime-py's custom-output callbacks can abort the interpreter at
exit). A plain file there grows as fast as the guest prints: half a gigabyte
a second, without end when the run has no deadline. So the path is a FIFO and
one thread per run drains it, keeping the first `MAX_CAPTURE_BYTES` of each
stream and discarding the rest; the guest never blocks for long, and nothing
reaches the disk. Where FIFOs do not exist, plain files remain.
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


class StreamCapture:
    """Paths for wasmtime to write a run's streams to, and what was written.

    `paths()` before the WASI config is built; `finish()` once the guest is
    done, returning {name: Capture} of the guest's own bytes.
    """

    def __init__(self, scratch: Path, names: tuple[str, ...] = ("stdout", "stderr")) -> None:
        self._paths = {name: scratch / name for name in names}
        self._captures = {name: Capture() for name in names}
        self._fds: dict[int, str] = {}
        self._stop = threading.Event()
        # finish() writes here to wake the drain thread at once: waiting out a
        # poll timeout instead cost every captured run ~50 ms.
        self._wake_r, self._wake_w = -1, -1
        self._thread: threading.Thread | None = None
        if hasattr(os, "mkfifo"):
            for name, path in self._paths.items():
                os.mkfifo(path, 0o600)
                # Non-blocking: opening a FIFO's read end would otherwise wait
                # for a writer, and wasmtime's open would wait for a reader.
                self._fds[os.open(path, os.O_RDONLY | os.O_NONBLOCK)] = name
            self._wake_r, self._wake_w = os.pipe()
            self._thread = threading.Thread(target=self._drain, name="spearpy-capture",
                                            daemon=True)
            self._thread.start()

    def paths(self) -> dict[str, Path]:
        return dict(self._paths)

    def _read_available(self, fd: int) -> bool:
        """Read what is there; False once the writer has closed its end."""
        capture = self._captures[self._fds[fd]]
        while True:
            try:
                chunk = os.read(fd, _CHUNK)
            except BlockingIOError:
                return True
            if not chunk:
                return False
            capture.write(chunk)

    def _drain(self) -> None:
        poller = select.poll()
        open_fds = set(self._fds)
        for fd in open_fds:
            poller.register(fd, select.POLLIN)
        poller.register(self._wake_r, select.POLLIN)
        # Ends on finish(), or when wasmtime closes every stream (its store is
        # gone): a run that was never finished must not keep a thread.
        while open_fds and not self._stop.is_set():
            for fd, _mask in poller.poll():
                if fd == self._wake_r:
                    continue  # the loop condition sees the stop flag
                if not self._read_available(fd):
                    poller.unregister(fd)
                    open_fds.discard(fd)
        if not open_fds:
            for fd in self._fds:
                os.close(fd)
            self._fds.clear()

    def finish(self) -> dict[str, Capture]:
        if self._thread is not None:
            self._stop.set()
            os.write(self._wake_w, b"x")
            self._thread.join()
            os.close(self._wake_r)
            os.close(self._wake_w)
            for fd in self._fds:
                with contextlib.suppress(OSError):
                    self._read_available(fd)  # what arrived after the last poll
                os.close(fd)
            self._fds.clear()
            self._thread = None
            return self._captures
        for name, path in self._paths.items():
            capture = self._captures[name]
            with contextlib.suppress(OSError), path.open("rb") as handle:
                data = handle.read(MAX_CAPTURE_BYTES + 1)
                capture.write(data)
        return self._captures
