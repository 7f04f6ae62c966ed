"""The user_stream source: a browser (any client of the run's user streams)
as the microphone. The data of each frame the client sends on the chosen
stream id is PCM16 LE at the mic's rate and channels, in pieces of any
size; they are cut into frames of frame_ms. The stream's close (its
session's end) is the end of the audio.

No thread: the client's frames already wake the guest, and the guest's
thread moves them into the mic's queue whenever it looks at the fd (the
stream's single consumer, as user_stream_read is for stream fds). That look
may happen inside an epoll wait's check, under the waker's lock: a sink
here must wake no one. The stream must be the mic's before its session
ends (a session's end drops what its streams hold, as for stream fds).
"""

from __future__ import annotations

from typing import Protocol

import spearpy.streams.ssf as ssf
from spearpy.audio.pcm import Rechunker
from spearpy.streams.channel import Channel, State
from spearpy.streams.hub import StreamHub


class PullSink(Protocol):
    def push(self, frame: bytes) -> None: ...
    def finish(self) -> None: ...


class StreamPuller:
    name = "user_stream"

    def __init__(self, hub: StreamHub, channel: Channel, frame_bytes: int) -> None:
        self._hub = hub
        self._channel = channel
        self._chunks = Rechunker(frame_bytes)
        self.done = False

    @property
    def live(self) -> bool:
        """Whether more audio may come while the guest waits."""
        return not self.done and self._channel.state is not State.CLOSED and \
            self._hub.can_change()

    def pull(self, sink: PullSink) -> None:
        """Move what the client sent into `sink`; at the stream's end, the
        padded tail and the end."""
        if self.done:
            return
        inbound = self._channel.inbound
        took = produced = False
        while True:
            frame, _ = inbound.take()
            if frame is None:
                break
            took = True
            try:
                header = ssf.check(frame)
            except ssf.SsfError:
                continue  # the hub only routes checked frames; never trust twice
            start = header.header_len + header.meta_len
            for chunk in self._chunks.feed(frame[start:start + header.data_len]):
                sink.push(chunk)
                produced = True
        if took:
            self._hub.guest_acted()
        if not produced and self._channel.state is not State.CLOSED:
            # Nothing new to read: the guest waits for its client (what
            # hub.wait_guest_idle, the stdio bridge's test, looks for).
            self._hub.idle_poll()
        if self._channel.state is State.CLOSED and not len(inbound):
            tail = self._chunks.flush()
            if tail is not None:
                sink.push(tail)
            self.done = True
            sink.finish()


def open_stream(hub: StreamHub | None, stream_id: int, frame_bytes: int) -> StreamPuller:
    """The puller for `stream_id`; LookupError when no client can reach the run
    or the session has no room for another stream."""
    if hub is None:
        raise LookupError("no client can reach this run (it was started without user "
                          "streams)")
    channel = hub.channel(stream_id)
    if channel is None:
        raise LookupError("the client session has no room for another stream")
    return StreamPuller(hub, channel, frame_bytes)
