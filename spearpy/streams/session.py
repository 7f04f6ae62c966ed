"""One client session on a run's hub: what a WebSocket, the stdio bridge or
an embedder uses to send frames to the guest and take the guest's frames.

A full inbound queue refuses a frame (`push` is False, `apush`/`push_wait`
wait for room): the client's reader stops, and its transport's flow control
pushes back on the sender. Nothing on the client side buffers beyond the
hub's bounded queues.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import spearpy.streams.ssf as ssf
from spearpy.errors import SpearpyError
from spearpy.observe.events import STREAM_DROP, STREAM_SESSION
from spearpy.streams.channel import Channel, State

if TYPE_CHECKING:
    from spearpy.streams.hub import StreamHub


class SessionClosed(SpearpyError, RuntimeError):
    """The session ended (the client closed it, or it was refused a frame)."""


class Session:
    def __init__(self, hub: StreamHub, session_id: int, client: str) -> None:
        self.hub = hub
        self.id = session_id
        self.client = client
        self.open = True
        self.reason = ""
        self.paused = 0  # frames refused for a full queue: times the client was held back
        self.reported = False  # its close was noted (by close, or at the run's end)
        self._next = 0  # round-robin start over channels, so no stream starves another

    @property
    def finished(self) -> bool:
        """Nothing more will come: closed, or the run ended and its output was taken."""
        if not self.open:
            return True
        return self.hub.ended and not any(len(c.outbound) for c in self.hub.channels_of(self))

    # ---- client -> guest -------------------------------------------------------

    def push(self, frame: bytes) -> bool:
        """Queue one frame for the guest: True, or False while its stream's
        queue is full. SsfError for a malformed or oversized frame, or one
        over the stream limit (the caller closes the session with the reason);
        SessionClosed once the session is over."""
        header = ssf.check(frame, self.hub.limits.max_frame_bytes)
        channel = self._channel_for(header.stream_id)
        if not channel.inbound.offer(frame):
            self.paused += 1
            return False
        channel.frames_in += 1
        channel.bytes_in += len(frame)
        return True

    def push_wait(self, frame: bytes, timeout: float | None = None) -> bool:
        """`push`, waiting for room up to `timeout` seconds (None: as long as it takes)."""
        end = None if timeout is None else time.monotonic() + timeout
        while not self.push(frame):
            remaining = None if end is None else end - time.monotonic()
            if remaining is not None and remaining <= 0:
                return False
            self.hub.wait_room(lambda: self._room_or_over(frame), remaining)
        return True

    async def apush(self, frame: bytes, timeout: float | None = None) -> bool:
        """`push_wait` for asyncio: the reader awaits here while the queue is full."""
        loop_end = None if timeout is None else time.monotonic() + timeout
        while not self.push(frame):
            remaining = None if loop_end is None else loop_end - time.monotonic()
            if remaining is not None and remaining <= 0:
                return False
            await self.hub.wait_room_async(lambda: self._room_or_over(frame), remaining)
        return True

    def _channel_for(self, stream_id: int) -> Channel:
        if not self.open or self.hub.ended:
            raise SessionClosed(self.reason or "the run has ended")
        channel, connected = self.hub.route(self, stream_id)
        if channel is None:
            if not self.open:
                raise SessionClosed(self.reason)
            raise ssf.SsfError(f"stream {stream_id} would be more than the "
                               f"{self.hub.limits.max_streams} streams a session may use")
        if connected:
            self.hub.changed()  # the guest's control fds became readable
        if channel.state is State.CLOSED:
            raise SessionClosed(f"stream {stream_id} was closed by the client")
        return channel

    def _room_or_over(self, frame: bytes) -> bool:
        if not self.open or self.hub.ended:
            return True
        channel = {c.stream_id: c for c in self.hub.channels_of(self)}.get(
            ssf.HEADER.unpack_from(frame)[5])
        return channel is None or channel.inbound.fits(len(frame))

    # ---- guest -> client ---------------------------------------------------------

    def pop(self, stream_id: int | None = None) -> bytes | None:
        """The next frame the guest wrote (on `stream_id`, or on any stream in
        turn), or None when there is none now."""
        channels = self.hub.channels_of(self)
        if stream_id is not None:
            channels = tuple(c for c in channels if c.stream_id == stream_id)
        count = len(channels)
        for i in range(count):
            channel = channels[(self._next + i) % count]
            frame, _size = channel.outbound.take()
            if frame is not None:
                self._next = (self._next + i + 1) % count
                return frame
        return None

    def pop_wait(self, timeout: float | None = None, stream_id: int | None = None
                 ) -> bytes | None:
        """`pop`, waiting up to `timeout` seconds; None on timeout or once `finished`."""
        self.hub.output.wait(lambda: self._has_output(stream_id) or self.finished, timeout)
        return self.pop(stream_id)

    async def apop(self, timeout: float | None = None, stream_id: int | None = None
                   ) -> bytes | None:
        await self.hub.output.wait_async(
            lambda: self._has_output(stream_id) or self.finished, timeout)
        return self.pop(stream_id)

    def _has_output(self, stream_id: int | None) -> bool:
        return any(len(c.outbound) for c in self.hub.channels_of(self)
                   if stream_id is None or c.stream_id == stream_id)

    def outbound_pending(self) -> int:
        return sum(len(c.outbound) for c in self.hub.channels_of(self))

    # ---- ending ----------------------------------------------------------------------

    def close_stream(self, stream_id: int) -> None:
        """The client is done with one stream: the guest's fds on it report
        EPOLLHUP once it has read what was sent."""
        self.hub.close_channel(self, stream_id)

    def reject(self, reason: str, nbytes: int) -> None:
        """The client sent what cannot be a frame here (malformed, oversized,
        one stream too many): drop it and end the session as an error."""
        with self.hub.lock:
            self.hub.note(STREAM_DROP, reason="malformed", session=self.id, frames=1,
                          bytes=nbytes, detail=reason)
        self.close(reason, error=True)

    def close(self, reason: str = "client closed", error: bool = False) -> None:
        """End the session: the guest gets SESSION_CLOSED and EPOLLHUP on its
        streams; what the guest wrote and the client did not take is dropped."""
        if not self.open:
            return
        self.open = False
        self.reason = reason
        channels = self.hub.detach(self, error)
        dropped = [c.outbound.clear() for c in channels]
        frames, nbytes = sum(d[0] for d in dropped), sum(d[1] for d in dropped)
        with self.hub.lock:
            if frames:
                self.hub.note(STREAM_DROP, reason="client_gone", session=self.id,
                              frames=frames, bytes=nbytes)
            if not self.reported:
                self.reported = True
                self.hub.note(STREAM_SESSION, **self.summary(channels, "close", reason,
                                                                error))
        self.hub.changed()

    def summary(self, channels: Sequence[Channel], action: str, reason: str,
                error: bool) -> dict[str, Any]:
        return {"action": action, "session": self.id, "client": self.client, "reason": reason,
                "error": error, "streams": len(channels),
                "frames_in": sum(c.frames_in for c in channels),
                "bytes_in": sum(c.bytes_in for c in channels),
                "frames_out": sum(c.frames_out for c in channels),
                "bytes_out": sum(c.bytes_out for c in channels), "paused": self.paused}
