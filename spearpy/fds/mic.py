"""Microphone fds (SPEAR's mic_*): a bounded queue of PCM frames fed by a
source, read one frame per mic_read.

A threaded source (spearpy.audio.pump) pushes from its own thread and wakes
the run's waker when the fd becomes readable, ends or fails, so a guest in
an infinite spear_epoll_wait wakes; a pulled source (a user stream) is moved
in on the guest's thread whenever the fd is looked at. State is SPEAR's
MicState: `generation` counts configurations (a set-param starts a new one,
and a failed start counts another, as SPEAR's does), and frames of an older
generation are refused, so a reconfigured mic never hands out the old
source's audio.

Readiness: EPOLLIN while a frame is queued, EPOLLERR once `last_error` is
set, EPOLLHUP when the source has ended (a file's end, a stream's close)
and the queue is empty.
"""

from __future__ import annotations

import threading
from collections import deque
from typing import TYPE_CHECKING, Any, Protocol

from spearpy import abi
from spearpy.fds.base import Fd

if TYPE_CHECKING:
    from spearpy.audio.params import MicFormat
    from spearpy.fds.waker import Waker

DEFAULT_MAX_QUEUE_BYTES = 512 * 1024  # SPEAR's MicState default


class Worker(Protocol):
    """A running source's thread (spearpy.audio.pump.Pump)."""

    @property
    def alive(self) -> bool: ...
    def stop(self) -> None: ...


class Puller(Protocol):
    """A source moved in on the guest's thread (spearpy.audio.userstream)."""

    @property
    def live(self) -> bool: ...
    def pull(self, sink: Any) -> None: ...


class _PullSink:
    """A puller's frames into the fd, for the generation it was attached in."""

    __slots__ = ("_fd", "_generation")

    def __init__(self, fd: MicFd, generation: int) -> None:
        self._fd, self._generation = fd, generation

    # No wake-ups: the guest's own thread pulls, inside its readiness checks,
    # which run under the waker's lock (a wake there would deadlock).
    def push(self, frame: bytes) -> None:
        self._fd.append(frame, self._generation, False, None)

    def finish(self) -> None:
        self._fd.end(self._generation)


class MicFd(Fd):
    kind = "Mic"
    __slots__ = ("_cond", "_pull_sink", "_puller", "_waker", "_worker", "bytes_read", "config",
                 "dropped_frames", "ended", "frames", "frames_read", "generation", "last_error",
                 "max_queue_bytes", "queue_bytes", "running", "source", "stub_pcm16")

    def __init__(self, waker: Waker) -> None:
        super().__init__()
        self._waker = waker
        # Guards the queue and state below; the producer of a lossless
        # source waits on it for room.
        self._cond = threading.Condition(threading.Lock())
        self.frames: deque[bytes] = deque()
        self.queue_bytes = 0
        self.max_queue_bytes = DEFAULT_MAX_QUEUE_BYTES
        self.dropped_frames = 0
        self.last_error: str | None = None
        self.running = False
        self.ended = False
        self.generation = 0
        self.config: MicFormat | None = None
        self.source: str | None = None
        # SPEAR keeps the stub's PCM across set-params until one gives another.
        self.stub_pcm16: bytes | None = None
        self.frames_read = self.bytes_read = 0
        self._worker: Worker | None = None
        self._puller: Puller | None = None
        self._pull_sink: _PullSink | None = None

    # ---- configuration (guest thread) ----------------------------------------

    def restart(self, fmt: MicFormat, max_queue_bytes: int | None) -> int:
        """Stop the current source, empty the queue and begin a new
        configuration; its generation is returned for the new source."""
        self.stop_source()
        with self._cond:
            self.frames.clear()
            self.queue_bytes = 0
            self.last_error = None
            self.ended = False
            self.generation += 1
            self.config = fmt
            if max_queue_bytes is not None:
                self.max_queue_bytes = max_queue_bytes
            self.running = True
            return self.generation

    def attach(self, source: str, worker: Worker | None = None,
               puller: Puller | None = None) -> None:
        self.source = source
        self._worker = worker
        self._puller = puller
        self._pull_sink = _PullSink(self, self.generation) if puller is not None else None

    def fail_start(self, message: str) -> None:
        """The source could not start (SPEAR: not running, a new generation,
        the reason in last_error)."""
        with self._cond:
            self.running = False
            self.generation += 1
            self.last_error = message
        self._waker.wake()

    def stop_source(self) -> None:
        """Stop the producer now (close, reconfiguration, the run's end)."""
        with self._cond:
            worker, self._worker = self._worker, None
            self._puller = self._pull_sink = None
            self.running = False
            self._cond.notify_all()  # a lossless producer waiting for room
        if worker is not None:
            worker.stop()  # its stop event refuses whatever it still pushes

    def halt(self, message: str) -> None:
        """Stop for good with `message` (a limit): the queue is dropped, so
        only EPOLLERR remains and a guest reading on EPOLLIN does not spin."""
        self.stop_source()
        with self._cond:
            self.frames.clear()
            self.queue_bytes = 0
            self.last_error = message
        self._waker.wake()

    # ---- the producer's side (any thread) -------------------------------------

    def push(self, frame: bytes, generation: int, wait_for_room: bool,
             stop: threading.Event | None) -> bool:
        """Queue a frame from the producer's thread; False when it should stop."""
        queued, readable = self.append(frame, generation, wait_for_room, stop)
        if readable:
            self._waker.wake()
        return queued

    def append(self, frame: bytes, generation: int, wait_for_room: bool,
               stop: threading.Event | None) -> tuple[bool, bool]:
        """Queue a frame, waking no one: (queued, the queue was empty before)."""
        with self._cond:
            if wait_for_room:
                # stop_source clears `running` under this lock before it wakes
                # us: its stop event may not be set yet when we look.
                self._cond.wait_for(lambda: generation != self.generation or
                                    not self.running or not self.frames or
                                    self.queue_bytes + len(frame) <= self.max_queue_bytes)
            if generation != self.generation or not self.running or (
                    stop is not None and stop.is_set()):
                return False, False
            was_empty = not self.frames
            self.frames.append(frame)
            self.queue_bytes += len(frame)
            while self.queue_bytes > self.max_queue_bytes and self.frames:
                self.queue_bytes -= len(self.frames.popleft())
                self.dropped_frames += 1
            return True, was_empty and bool(self.frames)

    def finish(self, generation: int) -> None:
        if self.end(generation):
            self._waker.wake()

    def end(self, generation: int) -> bool:
        """The source is over (waking no one); False for a stale generation."""
        with self._cond:
            if generation != self.generation:
                return False
            self.ended = True
            self.running = False
            return True

    def fail(self, message: str, generation: int) -> None:
        with self._cond:
            if generation != self.generation:
                return
            self.last_error = message
            self.running = False
        self._waker.wake()

    # ---- the guest's side -----------------------------------------------------

    def _pull(self) -> None:
        puller, sink = self._puller, self._pull_sink
        if puller is not None and sink is not None:
            puller.pull(sink)

    def head(self) -> bytes | None:
        self._pull()
        with self._cond:
            return self.frames[0] if self.frames else None

    def take(self, frame: bytes) -> None:
        """Remove the head frame the guest has just been given."""
        with self._cond:
            if self.frames and self.frames[0] is frame:
                self.frames.popleft()
                self.queue_bytes -= len(frame)
                self.frames_read += 1
                self.bytes_read += len(frame)
                self._cond.notify_all()

    def readiness(self) -> int:
        self._pull()
        mask = 0
        if self.frames:
            mask |= abi.EPOLLIN
        elif self.ended:
            mask |= abi.EPOLLHUP
        if self.last_error is not None:
            mask |= abi.EPOLLERR
        return mask

    def can_change(self) -> bool:
        if not self.running:
            return False
        puller, worker = self._puller, self._worker
        return (puller is not None and puller.live) or (worker is not None and worker.alive)

    def close(self) -> int:
        self.stop_source()
        return 0

    def status(self) -> dict[str, Any]:
        """mic_ctl get-status: SPEAR's fields, then spearpy's."""
        self._pull()
        with self._cond:
            return {"running": self.running, "last_error": self.last_error,
                    "queue_bytes": self.queue_bytes, "max_queue_bytes": self.max_queue_bytes,
                    "dropped_frames": self.dropped_frames, "generation": self.generation,
                    "config": self.config.as_json() if self.config is not None else None,
                    "source": self.source, "ended": self.ended}

    def close_summary(self) -> dict[str, Any]:
        return {"device": "mic", **self.metrics(), "last_error": self.last_error}

    def metrics(self) -> dict[str, Any]:
        with self._cond:
            return {"source": self.source, "frames_read": self.frames_read,
                    "bytes_read": self.bytes_read, "queued_frames": len(self.frames),
                    "queue_bytes": self.queue_bytes, "dropped_frames": self.dropped_frames}
