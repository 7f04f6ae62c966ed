"""The hub's records: one stream id of one session (a queue each way, and
counters), and one control fd's pending events."""

from __future__ import annotations

from collections import deque
from enum import StrEnum
from typing import Protocol

from spearpy.streams.limits import StreamLimits
from spearpy.streams.queue import FrameQueue


class State(StrEnum):
    INIT = "init"  # opened by the guest; the client has sent nothing on it yet
    CONNECTED = "connected"  # the client sent a frame on it
    CLOSED = "closed"  # its session ended, or the client closed it


class Channel:
    """One stream id of one session: a queue each way, and counters."""

    __slots__ = ("_hub", "bytes_in", "bytes_out", "error", "frames_in", "frames_out", "inbound",
                 "outbound", "state", "stream_id", "writer_blocked")

    def __init__(self, stream_id: int, limits: StreamLimits, hub: Notify, state: State) -> None:
        self.stream_id = stream_id
        self.state = state
        self.error = False  # closed because its session failed (EPOLLERR with the HUP)
        # The guest's last write found the outbound queue full: it waits for room.
        self.writer_blocked = False
        self.inbound = FrameQueue(limits.max_queue_bytes, limits.max_queue_frames,
                                  on_put=hub.wake_guest, on_take=hub.room_freed)
        self.outbound = FrameQueue(limits.max_queue_bytes, limits.max_queue_frames,
                                   on_put=hub.output_ready, on_take=self._outbound_taken)
        self._hub = hub
        self.frames_in = self.bytes_in = self.frames_out = self.bytes_out = 0

    def _outbound_taken(self) -> None:
        if self.writer_blocked:
            self._hub.wake_guest()
        self._hub.room_freed()


class Notify(Protocol):
    """Who a channel's queues wake (the hub)."""

    def wake_guest(self) -> None: ...
    def room_freed(self) -> None: ...
    def output_ready(self) -> None: ...


class CtlQueue:
    """The pending events of one control fd (8-byte records)."""

    __slots__ = ("dropped", "events", "limit")

    def __init__(self, limit: int) -> None:
        self.events: deque[tuple[int, int]] = deque()
        self.limit = limit
        self.dropped = 0

    def push(self, stream_id: int, kind: int) -> None:
        if len(self.events) >= self.limit:
            self.events.popleft()  # a guest that never reads loses the oldest, not memory
            self.dropped += 1
        self.events.append((stream_id, kind))
