"""User streams for an embedder: no WebSocket, the same session a WebSocket
client gets.

    handle = host.start("agent.wasm", streams=True)
    stream = handle.open_stream(1)
    stream.send(b"hello")
    frame = stream.recv(timeout=5)     # an ssf.Frame: data, meta, seq, ...
    handle.close_streams()             # the guest sees SESSION_CLOSED
"""

from __future__ import annotations

import threading
from typing import Any

import spearpy.streams.ssf as ssf
from spearpy.errors import SpearpyError
from spearpy.streams.hub import StreamHub
from spearpy.streams.session import Session, SessionClosed


class StreamClosed(SpearpyError, RuntimeError):
    """The stream cannot carry more frames: its session or the run ended."""


class UserStream:
    """The client's end of one stream id: frames in, the guest's frames out.

    Thread-safe for one sender and one receiver; `send` numbers frames 1, 2,
    ... (SSF's seq, per stream and direction)."""

    def __init__(self, session: Session, stream_id: int) -> None:
        self.session = session
        self.stream_id = stream_id
        self._seq = 0
        self._lock = threading.Lock()

    def _frame(self, data: bytes, meta: Any, msg_type: int) -> bytes:
        with self._lock:
            self._seq += 1
            seq = self._seq
        return ssf.build(self.stream_id, seq, bytes(data), ssf.meta_bytes(meta),
                         msg_type=msg_type)

    def send(self, data: bytes, meta: Any = None, *, msg_type: int = ssf.MsgType.DATA,
             timeout: float | None = None) -> None:
        """Queue one frame for the guest, waiting while its queue is full
        (TimeoutError after `timeout` seconds); StreamClosed once the session
        or the run is over. `meta`: None, bytes, or a value sent as JSON."""
        frame = self._frame(data, meta, msg_type)
        try:
            if not self.session.push_wait(frame, timeout):
                raise TimeoutError(f"stream {self.stream_id}: the guest's queue stayed full")
        except SessionClosed as exc:
            raise StreamClosed(str(exc)) from None

    async def asend(self, data: bytes, meta: Any = None, *,
                    msg_type: int = ssf.MsgType.DATA, timeout: float | None = None) -> None:
        frame = self._frame(data, meta, msg_type)
        try:
            if not await self.session.apush(frame, timeout):
                raise TimeoutError(f"stream {self.stream_id}: the guest's queue stayed full")
        except SessionClosed as exc:
            raise StreamClosed(str(exc)) from None

    def recv(self, timeout: float | None = None) -> ssf.Frame | None:
        """The guest's next frame on this stream; None once none can come (the
        session or the run ended and everything was taken); TimeoutError if
        `timeout` seconds pass first."""
        return self._decoded(self.session.pop_wait(timeout, self.stream_id))

    async def arecv(self, timeout: float | None = None) -> ssf.Frame | None:
        return self._decoded(await self.session.apop(timeout, self.stream_id))

    def _decoded(self, raw: bytes | None) -> ssf.Frame | None:
        if raw is not None:
            return ssf.decode(raw)  # the host checked it when the guest wrote it
        if self.session.finished:
            return None
        raise TimeoutError(f"stream {self.stream_id}: no frame from the guest in time")

    def close(self) -> None:
        """Done with this stream: the guest's fds on it report EPOLLHUP once
        it has read what was sent."""
        self.session.close_stream(self.stream_id)


class StreamClient:
    """An embedder's session on a run's hub, opened on first use."""

    def __init__(self, hub: StreamHub) -> None:
        self.hub = hub
        self._session: Session | None = None
        self._lock = threading.Lock()

    def session(self) -> Session:
        with self._lock:
            if self._session is None:
                self._session = self.hub.connect("api")
            return self._session

    def open_stream(self, stream_id: int) -> UserStream:
        if not 0 <= stream_id <= ssf.U32_MAX:
            raise ValueError(f"stream ids are u32, not {stream_id}")
        return UserStream(self.session(), stream_id)

    def close(self, reason: str = "client closed") -> None:
        """End the session: the guest gets SESSION_CLOSED."""
        with self._lock:
            session = self._session
        if session is not None:
            session.close(reason)
