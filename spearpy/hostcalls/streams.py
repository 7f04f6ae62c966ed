"""The user_stream_* family (SPEAR's user streams): fds over a run's StreamHub.

Return codes are SPEAR's: -EINVAL for a read on an OUT fd and a write on an
IN fd (what SPEAR's host returns), for a direction out of range, and for a
written frame that is not SSF v1, is over the frame limit or names another
stream; -ENOTCONN for a write before the client has used the stream, and
for any open on a run that no client can reach; -EPIPE for a write after
the client session ended, and for a read of a closed stream with nothing
left; -EAGAIN when nothing is ready or the outbound queue is full; -ENOSPC
with the needed length when the buffer is too small (the frame or event is
kept); -EBADF for any other fd. Stream ids are u32 (one past 2**31 arrives
as a negative i32 and is taken as its u32 bits; SPEAR refuses it).

Events are emitted here, on the guest's thread: what the client side did
since the last stream hostcall (sessions, drops) first, then the call's own.
"""

from __future__ import annotations

import struct
import time
from typing import TYPE_CHECKING

import spearpy.streams.ssf as ssf
from spearpy import abi
from spearpy.fds.stream import BACKPRESSURE_EVENT_INTERVAL_S, UserStreamCtlFd, UserStreamFd
from spearpy.memory import GuestFault
from spearpy.observe import events as ev
from spearpy.streams.channel import State
from spearpy.streams.hub import StreamHub
from spearpy.streams.limits import DIR_BIDI, DIR_IN, DIR_OUT, ENOTCONN, EPIPE

if TYPE_CHECKING:
    from spearpy.context import RunContext

_EVENT = struct.Struct("<II")


def _hub(run: RunContext) -> StreamHub | None:
    hub = run.options.streams
    if hub is not None and hub.has_notes:
        for kind, data in hub.take_notes():
            run.events.emit(kind, **data)
    return hub


def user_stream_ctl_open(run: RunContext) -> int:
    hub = _hub(run)
    if hub is None:
        return ENOTCONN
    entry = UserStreamCtlFd(hub)
    fd = run.fds.open(entry)
    if fd < 0:
        entry.close()  # refused (EMFILE): unregister its queue
    return fd


def user_stream_ctl_read(run: RunContext, fd: int, out_ptr: int, out_len_ptr: int) -> int:
    hub = _hub(run)
    entry = run.fds.get(fd, UserStreamCtlFd)
    if entry is None or hub is None:
        return abi.EBADF
    events = entry.queue.events
    with hub.lock:  # the client side may drop the oldest event of a full queue
        head = events[0] if events else None
    if head is None:
        return abi.EAGAIN
    try:
        rc = run.memory.write_out(out_ptr, out_len_ptr, _EVENT.pack(*head))
    except GuestFault:
        return abi.EFAULT
    if rc >= 0:
        with hub.lock:
            if events and events[0] is head:
                events.popleft()
    return rc


def user_stream_open(run: RunContext, stream_id: int, direction: int) -> int:
    hub = _hub(run)
    if hub is None:
        return ENOTCONN
    if direction not in (DIR_IN, DIR_OUT, DIR_BIDI):
        return abi.EINVAL
    stream_id &= 0xFFFFFFFF  # a u32 id in an i32: ids past 2**31 arrive negative
    channel = hub.channel(stream_id)
    if channel is None:
        return abi.EMFILE  # the session's max_streams stream ids are in use
    entry = UserStreamFd(hub, channel, direction)
    fd = run.fds.open(entry)
    if fd >= 0:
        run.events.emit(ev.STREAM_OPEN, fd, stream_id=stream_id,
                        direction=entry.direction_name)
    return fd


def user_stream_read(run: RunContext, fd: int, out_ptr: int, out_len_ptr: int) -> int:
    _hub(run)
    entry = run.fds.get(fd, UserStreamFd)
    if entry is None:
        return abi.EBADF
    if not entry.direction & DIR_IN:
        return abi.EINVAL
    inbound = entry.channel.inbound
    frame = inbound.peek()
    if frame is None:
        return EPIPE if entry.channel.state is State.CLOSED else abi.EAGAIN
    try:
        rc = run.memory.write_out(out_ptr, out_len_ptr, frame)
    except GuestFault:
        return abi.EFAULT
    if rc >= 0:
        inbound.take()  # the guest's thread is the queue's only consumer: still its head
        entry.hub.guest_acted()
        entry.frames_read += 1
        entry.bytes_read += rc
    return rc


def user_stream_write(run: RunContext, fd: int, buf_ptr: int, length: int) -> int:
    hub = _hub(run)
    entry = run.fds.get(fd, UserStreamFd)
    if entry is None or hub is None:
        return abi.EBADF
    if not entry.direction & DIR_OUT:
        return abi.EINVAL
    if length < ssf.HEADER_LEN or length > hub.limits.max_frame_bytes:
        return abi.EINVAL  # checked before reading: no frame is read past the limit
    channel = entry.channel
    if channel.state is not State.CONNECTED:
        return ENOTCONN if channel.state is State.INIT else EPIPE
    if not channel.outbound.fits(length):
        return _backpressure(run, fd, entry, length)
    try:
        frame = run.memory.read(buf_ptr, length)
    except GuestFault:
        return abi.EFAULT
    try:
        header = ssf.check(frame)
    except ssf.SsfError:
        return abi.EINVAL
    if header.stream_id != entry.stream_id:
        return abi.EINVAL
    if not channel.outbound.offer(frame):
        return _backpressure(run, fd, entry, length)  # the client side closed meanwhile
    channel.writer_blocked = False
    hub.guest_acted()
    entry.want = 0
    entry.frames_written += 1
    entry.bytes_written += length
    channel.frames_out += 1
    channel.bytes_out += length
    return 0


def _backpressure(run: RunContext, fd: int, entry: UserStreamFd, length: int) -> int:
    if not entry.want:  # a new episode: the last write went through
        now = time.monotonic()
        if now - entry.last_backpressure_event >= BACKPRESSURE_EVENT_INTERVAL_S:
            entry.last_backpressure_event = now
            outbound = entry.channel.outbound
            run.events.emit(ev.STREAM_BACKPRESSURE, fd, stream_id=entry.stream_id,
                            queued_frames=len(outbound), queued_bytes=outbound.nbytes,
                            frame_bytes=length)
    entry.want = length
    entry.eagain += 1
    # Set before the guest waits: the client's next take wakes it (the take
    # that might slip in between sees the flag and wakes it early: harmless).
    entry.channel.writer_blocked = True
    return abi.EAGAIN


def user_stream_close(run: RunContext, fd: int) -> int:
    _hub(run)
    entry = run.fds.lookup(fd)
    if entry is None:
        return run.fds.close(fd)  # 0 if it was closed before, EBADF if never opened
    if isinstance(entry, UserStreamFd):
        run.events.emit(ev.STREAM_CLOSE, fd, **entry.summary("guest"))
    elif not isinstance(entry, UserStreamCtlFd) and not _is_replayed_stream(entry):
        return abi.EBADF
    return run.fds.close(fd)


def _is_replayed_stream(entry: object) -> bool:
    from spearpy.durable.golive import Unbuilt

    return isinstance(entry, Unbuilt) and entry.call.startswith("user_streams.")


def start_streams(run: RunContext) -> None:
    """At the run's start: clients' frames wake the guest."""
    hub = run.options.streams
    if hub is not None:
        hub.bind(run.interrupts.waker)


def end_streams(run: RunContext) -> None:
    """At the run's end: report the streams still open, let the client drain
    what the guest wrote, and report the session still attached."""
    hub = _hub(run)
    if hub is None:
        return
    for fd, entry in run.fds.entries():
        if isinstance(entry, UserStreamFd):
            run.events.emit(ev.STREAM_CLOSE, fd, **entry.summary("run_end"))
    session = hub.unbind()
    if session is not None and not session.reported:
        session.reported = True
        run.events.emit(ev.STREAM_SESSION, **session.summary(
            hub.channels_of(session), "close", "run_ended", False))
    _hub(run)
