"""User streams in durable runs (docs/durable.md).

What a client sent and the guest read arrives through `user_stream_read`
and `user_stream_ctl_read`, journaled like any answer from the world; what
the guest wrote went to the client then and is not sent again. But
`user_stream_open` and `user_stream_ctl_open` also open fds, and fd numbers
are handed out in order and never reused: a replay that only returned
their journaled answers would leave the table short, and every later fd
(a mic, an epoll, a chat session) would get another number than the guest
was told. So each open answered from the journal opens its fd again, at the
number the journal holds:

- on a run with a hub (a resume in `Host.run(streams=...)`, `spearpy
  serve`), a real stream fd on the hub's channel for that id: a client that
  connects, before or after the run goes live, reaches the resumed run;
- a SESSION_CLOSED the guest read from the journal ends the streams it
  had reopened (StreamHub.end_resumed): they were that session's, and the
  next one starts fresh, as it did then;
- a client that attached while the run replayed, before the replay reached
  a stream's open, connected that stream then: the STREAM_CONNECTED queued
  for it is dropped as the run goes live if the guest still holds the
  stream (StreamHub.went_live), since the guest's journaled control reads
  already hold the connect it read;
- on a run without one (a replay: no client needed), a placeholder
  (`durable.golive.Unbuilt`); the run cannot go live while one is open, and
  says so (the go-live hook below) instead of leaving the guest to wait on
  a stream no client can reach.
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING

from spearpy.durable.golive import Rebuilt, Unbuilt
from spearpy.durable.golive import mismatch as _mismatch
from spearpy.fds.stream import UserStreamCtlFd, UserStreamFd, open_stream_fds
from spearpy.memory import GuestFault
from spearpy.observe import events as ev
from spearpy.streams.limits import CTL_SESSION_CLOSED

if TYPE_CHECKING:
    from spearpy.context import RunContext
    from spearpy.fds.base import Fd

_FAMILY = "user_streams"
CTL_EVENT_BYTES = 8  # one control event: stream id, kind (u32 each)


def stream_replayed(run: RunContext, name: str, args: tuple[int, ...], rc: int | None) -> None:
    if rc is None or rc < 0:
        return
    hub = run.options.streams
    if name == "user_stream_ctl_open":
        _open_as(run, UserStreamCtlFd(hub) if hub is not None else
                 Unbuilt(f"{_FAMILY}.{name}"), rc, name)
    elif name == "user_stream_open":
        stream_id, direction = args[0] & 0xFFFFFFFF, args[1]
        channel = hub.channel(stream_id, resumed=True) if hub is not None else None
        if hub is not None and channel is None:
            raise _mismatch(run, f"user_stream_open of stream {stream_id}: the client session "
                                 "has no room for another stream now")
        if hub is None or channel is None:
            _open_as(run, Unbuilt(f"{_FAMILY}.{name}"), rc, name)
        else:
            entry = UserStreamFd(hub, channel, direction)
            _open_as(run, entry, rc, name)
            run.events.emit(ev.STREAM_OPEN, rc, stream_id=stream_id,
                            direction=entry.direction_name)
    elif name == "user_stream_ctl_read" and rc == CTL_EVENT_BYTES and hub is not None:
        try:
            _stream_id, kind = struct.unpack("<II", run.memory.read(args[1], CTL_EVENT_BYTES))
        except GuestFault:
            return
        if kind == CTL_SESSION_CLOSED:
            hub.end_resumed()
    elif name == "user_stream_read":
        stream = run.fds.get(args[0], UserStreamFd)
        if stream is not None:  # the counters its stream_close event reports
            stream.frames_read += 1
            stream.bytes_read += rc
    elif name == "user_stream_write":
        stream = run.fds.get(args[0], UserStreamFd)
        if stream is not None:
            stream.frames_written += 1
            stream.bytes_written += args[2]


def _open_as(run: RunContext, entry: Fd, fd: int, name: str) -> None:
    """`entry` in the table at `fd`, the number the journaled run got."""
    got = run.fds.open(entry)
    if got != fd:
        if got >= 0:
            run.fds.discard(got)
        entry.close()
        raise _mismatch(run, f"{name} opened fd {fd} in the journaled run, fd {got} now")
    assert run.journal is not None
    run.journal.at_go_live(_streams_go_live)


def _streams_go_live(run: RunContext) -> Rebuilt:
    if run.options.streams is not None:  # no second STREAM_CONNECTED for a stream it holds
        run.options.streams.went_live(entry.channel for _fd, entry in open_stream_fds(run.fds))
    done = Rebuilt()
    held = []
    for fd, entry in run.fds.entries():
        if isinstance(entry, Unbuilt) and entry.call.startswith(f"{_FAMILY}."):
            done.handled.add(fd)
            held.append(f"fd {fd} ({entry.call.partition('.')[2]})")
    if held:
        done.refused.append(
            f"{', '.join(held)} opened from the journal, and this run has no user streams "
            "for a client to reach them by: resume it with streams (Host.run(streams=...); "
            "spearpy run --journal PATH --stream-stdio MODULE; spearpy serve resumes its own)")
    return done
