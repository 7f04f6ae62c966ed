"""User-stream fds: one stream id opened by the guest in a direction, and the
control fd that announces streams and the end of a client session.

Both are fed from the client's thread (a WebSocket on the event loop, the
stdio bridge, an embedder): their hub wakes the run's waker after every
change, so a guest blocked in spear_epoll_wait wakes when a frame arrives, a
client connects or goes away. Readiness is computed from the queues when
asked, never cached, so it cannot go stale.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from spearpy import abi
from spearpy.fds.base import Fd
from spearpy.streams.channel import Channel, CtlQueue, State
from spearpy.streams.hub import StreamHub
from spearpy.streams.limits import DIR_IN, DIR_OUT

if TYPE_CHECKING:
    from spearpy.fds.table import FdTable

_DIRECTIONS = {1: "in", 2: "out", 3: "bidi"}
# At most one backpressure event per fd per this many seconds: a client that
# reads slowly makes many short episodes, and each would be an event.
BACKPRESSURE_EVENT_INTERVAL_S = 1.0


class UserStreamFd(Fd):
    kind = "UserStream"
    __slots__ = ("bytes_read", "bytes_written", "channel", "direction", "eagain",
                 "frames_read", "frames_written", "hub", "last_backpressure_event", "want")

    def __init__(self, hub: StreamHub, channel: Channel, direction: int) -> None:
        super().__init__()
        self.hub = hub
        self.channel = channel
        self.direction = direction
        # The size of the frame a full queue last refused: EPOLLOUT waits until
        # that frame fits, so a guest retrying on EPOLLOUT does not spin.
        self.want = 0
        self.frames_read = self.bytes_read = self.frames_written = self.bytes_written = 0
        self.eagain = 0
        self.last_backpressure_event = -BACKPRESSURE_EVENT_INTERVAL_S

    @property
    def stream_id(self) -> int:
        return self.channel.stream_id

    @property
    def direction_name(self) -> str:
        return _DIRECTIONS[self.direction]

    def readiness(self) -> int:
        channel = self.channel
        mask = 0
        if self.direction & DIR_IN:
            if len(channel.inbound):
                mask |= abi.EPOLLIN
            else:
                self.hub.idle_poll()
        if self.direction & DIR_OUT and channel.state is State.CONNECTED and \
                channel.outbound.fits(self.want or 1):
            mask |= abi.EPOLLOUT
        if channel.state is State.CLOSED:
            mask |= abi.EPOLLHUP | (abi.EPOLLERR if channel.error else 0)
        return mask

    def can_change(self) -> bool:
        # Even after its session: the guest's unread frames are still there, and
        # a writer may be waiting for the client to drain the outbound queue.
        return (self.channel.state is not State.CLOSED and self.hub.can_change()) or bool(
            len(self.channel.outbound))

    def metrics(self) -> dict[str, Any]:
        channel = self.channel
        return {"stream_id": self.stream_id, "direction": self.direction_name,
                "state": channel.state.value, "frames_read": self.frames_read,
                "bytes_read": self.bytes_read, "frames_written": self.frames_written,
                "bytes_written": self.bytes_written, "eagain_writes": self.eagain,
                "inbound_frames": len(channel.inbound), "inbound_bytes": channel.inbound.nbytes,
                "outbound_frames": len(channel.outbound),
                "outbound_bytes": channel.outbound.nbytes}

    def summary(self, reason: str) -> dict[str, Any]:
        """The data of this fd's stream_close event."""
        return {"stream_id": self.stream_id, "direction": self.direction_name,
                "reason": reason, "frames_read": self.frames_read,
                "bytes_read": self.bytes_read, "frames_written": self.frames_written,
                "bytes_written": self.bytes_written, "eagain_writes": self.eagain}


class UserStreamCtlFd(Fd):
    kind = "UserStreamCtl"
    __slots__ = ("hub", "queue")

    def __init__(self, hub: StreamHub) -> None:
        super().__init__()
        self.hub = hub
        self.queue: CtlQueue = hub.open_ctl()

    def readiness(self) -> int:
        if self.queue.events:
            return abi.EPOLLIN
        self.hub.idle_poll()
        return 0

    def can_change(self) -> bool:
        return self.hub.can_change()

    def close(self) -> int:
        self.hub.close_ctl(self.queue)
        return 0

    def metrics(self) -> dict[str, Any]:
        return {"pending_events": len(self.queue.events), "dropped_events": self.queue.dropped}


def open_stream_fds(table: FdTable) -> list[tuple[int, UserStreamFd]]:
    return [(fd, entry) for fd, entry in table.entries() if isinstance(entry, UserStreamFd)]
