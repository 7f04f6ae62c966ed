"""rtasr fds (SPEAR's realtime speech recognition): the state one fd shares
between the guest's thread and its connection's threads.

The guest writes audio and control events into a bounded send queue and
reads one server event per call from a bounded receive queue; the
connection (spearpy.asr.connection) drains the first and fills the second
from its own threads, under the fd's lock, and wakes the run's waker after
each change so a guest blocked in spear_epoll_wait wakes. Readiness is
computed from the state when asked, never cached.

States and queue defaults are SPEAR's (Init, Configured, Connecting,
Connected, Draining, Closed, Error; 1 MiB each way). Where SPEAR raises HUP
as soon as the server closes, HUP here waits until the guest has read the
events already queued, so a clean end loses no transcription.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from typing import TYPE_CHECKING, Any, Protocol

from spearpy import abi
from spearpy.asr import protocol
from spearpy.asr.segmentation import CLIENT_COMMIT, Segmentation
from spearpy.fds.base import Fd

if TYPE_CHECKING:
    from spearpy.fds.waker import Waker

INIT, CONFIGURED, CONNECTING, CONNECTED = "Init", "Configured", "Connecting", "Connected"
DRAINING, CLOSED, ERROR = "Draining", "Closed", "Error"
DEFAULT_QUEUE_BYTES = 1 << 20
# A guest may raise its queues (SPEAR's max_send/recv_queue_bytes params), not
# past this: the host holds them.
MAX_QUEUE_BYTES = 16 << 20


class Worker(Protocol):
    """What feeds the fd from other threads (a WebSocket connection, the stub)."""

    def stop(self, flush: bool) -> None: ...

    @property
    def alive(self) -> bool: ...


class RtAsrFd(Fd):
    kind = "RtAsr"
    __slots__ = ("audio_bytes", "buffered_since_flush", "cond", "dropped_events", "events_in",
                 "hup", "last_audio_at", "last_error", "last_flush_at", "max_recv_queue_bytes",
                 "max_send_queue_bytes", "params", "pending_flush", "recv_queue",
                 "recv_queue_bytes", "segmentation", "send_queue", "send_queue_bytes", "state",
                 "waker", "want", "worker")

    def __init__(self, waker: Waker) -> None:
        super().__init__()
        self.waker = waker
        self.cond = threading.Condition(threading.Lock())
        self.state = INIT
        self.params: dict[str, Any] = {}
        # Items the connection sends: audio bytes, or a JSON text event.
        self.send_queue: deque[bytes | str] = deque()
        self.send_queue_bytes = 0
        self.max_send_queue_bytes = DEFAULT_QUEUE_BYTES
        self.recv_queue: deque[bytes] = deque()
        self.recv_queue_bytes = 0
        self.max_recv_queue_bytes = DEFAULT_QUEUE_BYTES
        self.dropped_events = 0
        self.events_in = 0
        self.audio_bytes = 0
        self.last_error: str | None = None
        self.hup = False  # the server closed cleanly
        self.segmentation = Segmentation()
        self.pending_flush = False
        self.buffered_since_flush = 0
        now = time.monotonic()
        self.last_flush_at = self.last_audio_at = now
        self.worker: Worker | None = None
        self.want = 0  # the size of the write the full queue last refused

    # ---- epoll -----------------------------------------------------------

    def readiness(self) -> int:
        with self.cond:
            mask = abi.EPOLLIN if self.recv_queue else 0
            # SPEAR's test is `queued < max`; here the write the queue last
            # refused must fit, so a guest retrying on EPOLLOUT does not spin.
            if self.send_queue_bytes + max(self.want, 1) <= self.max_send_queue_bytes and \
                    self.state not in (DRAINING, CLOSED, ERROR):
                mask |= abi.EPOLLOUT
            if self.state == ERROR:
                mask |= abi.EPOLLERR
            if (self.hup or self.state == CLOSED) and not self.recv_queue:
                mask |= abi.EPOLLHUP
            return mask

    def can_change(self) -> bool:
        worker = self.worker
        return worker is not None and worker.alive

    # ---- the guest's side (its thread) ------------------------------------

    def enqueue(self, item: bytes | str, *, audio: bool = False) -> bool:
        """Queue an item to send; False when it does not fit (EAGAIN)."""
        with self.cond:
            n = len(item)
            if self.send_queue_bytes + n > self.max_send_queue_bytes:
                self.want = n
                return False
            self.want = 0
            self.send_queue.append(item)
            self.send_queue_bytes += n
            now = time.monotonic()
            if audio:
                self.audio_bytes += n
                self.buffered_since_flush += n
                self.last_audio_at = now
                self._maybe_autoflush(now)
            self.cond.notify_all()
            return True

    def flush_marker(self, text: str, *, pending: bool) -> bool:
        """Queue a commit (pending=True) or clear: SPEAR resets the count of
        audio since the last flush either way."""
        if not self.enqueue(text):
            return False
        with self.cond:
            self.pending_flush = pending
            self.buffered_since_flush = 0
            self.last_flush_at = time.monotonic()
        return True

    def reset_flush(self) -> None:
        """A new autoflush setting starts from now (SPEAR's)."""
        with self.cond:
            self.pending_flush = False
            self.buffered_since_flush = 0
            self.last_flush_at = self.last_audio_at = time.monotonic()

    def take_event(self) -> bytes | None:
        with self.cond:
            return self.recv_queue[0] if self.recv_queue else None

    def pop_event(self) -> None:
        with self.cond:
            if self.recv_queue:
                self.recv_queue_bytes -= len(self.recv_queue.popleft())

    def status(self) -> dict[str, Any]:
        with self.cond:
            return {"state": self.state, "last_error": self.last_error,
                    "send_queue_bytes": self.send_queue_bytes,
                    "recv_queue_bytes": self.recv_queue_bytes,
                    "max_send_queue_bytes": self.max_send_queue_bytes,
                    "max_recv_queue_bytes": self.max_recv_queue_bytes,
                    "dropped_events": self.dropped_events,
                    # spearpy's additions
                    "audio_bytes_written": self.audio_bytes, "events_received": self.events_in}

    def close(self) -> int:
        with self.cond:
            self.state = CLOSED
            worker, self.worker = self.worker, None
            self.cond.notify_all()
        if worker is not None:
            worker.stop(self.segmentation.flush_on_close)
        return 0

    def metrics(self) -> dict[str, Any]:
        return self.status()

    def close_summary(self) -> dict[str, Any]:
        return {"device": "rtasr", **self.status()}

    # ---- the connection's side (its threads) ------------------------------

    def next_item(self, stopping: threading.Event, idle_s: float) -> bytes | str | None:
        """The next item to send, waiting up to `idle_s`; None when there is
        none (or `stopping` is set). The client-commit autoflush runs here
        too, so silence after the last write still commits."""
        with self.cond:
            if not self.send_queue and not stopping.is_set():
                self.cond.wait(idle_s)
            self._maybe_autoflush(time.monotonic())
            if not self.send_queue:
                return None
            # Only a guest the full queue refused can be waiting for this room:
            # waking on every item would be a thread hand-off per audio frame.
            was_full = self.send_queue_bytes + max(self.want, 1) > self.max_send_queue_bytes
            item = self.send_queue.popleft()
            self.send_queue_bytes -= len(item)
            if isinstance(item, str):
                self.pending_flush = False
        if was_full:
            self.waker.wake()  # room in the queue: EPOLLOUT
        return item

    def push_event(self, payload: bytes) -> None:
        with self.cond:
            if self.state == CLOSED:
                return
            self.events_in += 1
            # EPOLLIN was already true otherwise: no wait can be blocked on it.
            was_empty = not self.recv_queue
            self.recv_queue.append(payload)
            self.recv_queue_bytes += len(payload)
            # A flood is bounded like SPEAR's: the oldest events go, counted.
            while self.recv_queue_bytes > self.max_recv_queue_bytes and self.recv_queue:
                self.recv_queue_bytes -= len(self.recv_queue.popleft())
                self.dropped_events += 1
        if was_empty:
            self.waker.wake()

    def fail(self, message: str) -> None:
        with self.cond:
            if self.state != CLOSED:
                self.state = ERROR
                self.last_error = message
        self.waker.wake()

    def hang_up(self) -> None:
        with self.cond:
            self.hup = True
            if self.state not in (CLOSED, ERROR):
                self.state = DRAINING
        self.waker.wake()

    def set_connected(self) -> bool:
        """Connecting -> Connected; False if the fd closed or failed meanwhile."""
        with self.cond:
            if self.state != CONNECTING:
                return False
            self.state = CONNECTED
        self.waker.wake()
        return True

    def _maybe_autoflush(self, now: float) -> None:
        # Under the lock. SPEAR's client_commit strategy: commit when enough
        # audio, time or silence has passed since the last flush.
        seg = self.segmentation.client_commit
        if self.segmentation.strategy != CLIENT_COMMIT or seg is None or self.pending_flush \
                or not self.buffered_since_flush:
            return
        since_flush_ms = (now - self.last_flush_at) * 1000.0
        if since_flush_ms < seg.min_flush_gap_ms:
            return
        silent_ms = (now - self.last_audio_at) * 1000.0
        due = ((seg.max_buffer_bytes is not None
                and self.buffered_since_flush >= seg.max_buffer_bytes)
               or (seg.flush_interval_ms is not None and since_flush_ms >= seg.flush_interval_ms)
               or (seg.silence_ms is not None and silent_ms >= seg.silence_ms))
        if not due or self.send_queue_bytes + len(protocol.COMMIT) > self.max_send_queue_bytes:
            return
        self.send_queue.append(protocol.COMMIT)
        self.send_queue_bytes += len(protocol.COMMIT)
        self.pending_flush = True
        self.buffered_since_flush = 0
        self.last_flush_at = now
        self.cond.notify_all()
