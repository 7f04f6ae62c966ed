"""A run's user streams: the channels (one per stream id) between the guest
and one client session at a time, and the guest's control-event queues.

The guest's thread reaches the hub through its fds (spearpy.fds.stream); a
client (a WebSocket, the stdio bridge, an embedder) through a `Session`
(spearpy.streams.session). The hub's lock guards only its bookkeeping
(channels, session, control queues, notes); queues have their own, and no
one wakes anyone while holding the hub's lock, so the guest's waits (which
look at readiness under the waker's lock) can never deadlock with a client.

Sessions come one after the other: a session's channels close with it
(their fds report EPOLLHUP), and the next session starts fresh ones. What
happens on the client side is noted here and turned into events on the
guest's thread, the only one that emits a run's events.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from spearpy.errors import SpearpyError
from spearpy.observe.events import STREAM_SESSION
from spearpy.streams.channel import Channel, CtlQueue, State
from spearpy.streams.limits import CTL_SESSION_CLOSED, CTL_STREAM_CONNECTED, StreamLimits
from spearpy.streams.queue import Signal

if TYPE_CHECKING:
    from spearpy.fds.waker import Waker
    from spearpy.streams.session import Session

MAX_NOTES = 256  # client-side happenings waiting for the guest's thread to report them


class StreamsUnavailable(SpearpyError, RuntimeError):
    """No client session can attach now: one is attached, or the run ended."""


class StreamHub:
    """Create one per run, before it starts if a client must be able to attach
    at once; pass it as `Host.run(..., streams=hub)`; clients `connect()`.

    `max_sessions`: how many client sessions may attach over the run's life,
    one at a time (None: any number); the stdio bridge allows one, so a guest
    waiting on streams after it ended is not left waiting for nobody."""

    def __init__(self, limits: StreamLimits | None = None, *,
                 max_sessions: int | None = None) -> None:
        self.limits = limits or StreamLimits()
        # What client-side waits block on: the guest's output (and any change of
        # state), and room in an inbound queue (and the guest's activity).
        self.output = Signal()
        self.room = Signal()
        self.room_waiters = 0  # waits on `room` in progress: only then is a take worth a wake
        self._lock = threading.Lock()
        self._waker: Waker | None = None
        self._bound = False
        self.ended = False  # the run is over
        self._channels: dict[int, Channel] = {}
        # The same channels as a tuple, replaced (never changed) under the lock:
        # the per-frame paths read it without taking the lock.
        self._listed: tuple[Channel, ...] = ()
        self._session: Session | None = None
        self._sessions = 0
        self._max_sessions = max_sessions
        self._ctl: list[CtlQueue] = []
        self._notes: deque[tuple[str, dict[str, Any]]] = deque()
        self.notes_dropped = 0
        self._idle_polls = 0
        self._probing = 0
        self.activity = 0  # frames the guest read or wrote (guest_acted)
        # Streams a resumed run reopened from its journal (durable runs) that
        # no session has taken yet: the next one does.
        self._resumed: set[int] = set()

    # ---- wake-ups --------------------------------------------------------------

    def changed(self) -> None:
        """Wake everyone after a change of state (never with the hub's lock held)."""
        self.wake_guest()
        self.output.notify()
        self.room.notify()

    def wake_guest(self) -> None:
        waker = self._waker
        if waker is not None:
            waker.wake()

    def output_ready(self) -> None:
        self.output.notify()

    def room_freed(self) -> None:
        if self.room_waiters:
            self.room.notify()

    def wait_room(self, done: Callable[[], bool], timeout: float | None) -> bool:
        """Block on `room` (a frame taken, the guest's activity, a change of state)."""
        with self._lock:
            self.room_waiters += 1
        try:
            return self.room.wait(done, timeout)
        finally:
            with self._lock:
                self.room_waiters -= 1

    async def wait_room_async(self, done: Callable[[], bool], timeout: float | None) -> bool:
        with self._lock:
            self.room_waiters += 1
        try:
            return await self.room.wait_async(done, timeout)
        finally:
            with self._lock:
                self.room_waiters -= 1

    def guest_acted(self) -> None:
        """The guest read or wrote a frame (the stdio bridge waits for quiet)."""
        self.activity += 1
        if self.room_waiters:
            self.room.notify()

    # ---- the run's side (guest thread) -------------------------------------------

    def bind(self, waker: Waker) -> None:
        with self._lock:
            if self._bound:
                raise RuntimeError("a StreamHub serves one run; this one already has")
            self._bound = True
            self._waker = waker

    def unbind(self) -> Session | None:
        """The run ended: clients drain what the guest wrote, then see the end.
        Returns the session still attached, if any."""
        with self._lock:
            self.ended = True
            self._waker = None
            session = self._session
        self.changed()
        return session

    def channel(self, stream_id: int, resumed: bool = False) -> Channel | None:
        """The current session's channel for `stream_id`, opened (INIT) if the
        client has not used it yet; None when the session is at max_streams.

        `resumed`: a resumed run reopens a stream its journal says the guest
        had (hostcalls/streams_golive.py). The guest was told long ago that
        its client is there, so it is connected at once: what the guest
        writes waits in its queue (backpressure once full, as for a slow
        client) for the session attached now or the next one, which takes it
        with no STREAM_CONNECTED. So the guest can answer a question it read
        before the crash to the client that reconnects, whenever it does."""
        with self._lock:
            channel = self._channels.get(stream_id)
            if channel is None:
                if len(self._channels) >= self.limits.max_streams:
                    return None
                channel = Channel(stream_id, self.limits, self, State.INIT)
                self._channels[stream_id] = channel
                self._listed = (*self._listed, channel)
            if resumed and channel.state is State.INIT:
                channel.state = State.CONNECTED
                if self._session is None:
                    self._resumed.add(stream_id)
            return channel

    def went_live(self, held: Iterable[Channel]) -> None:
        """A resumed run goes on live holding stream fds on the channels
        `held` (opened from the journal and not closed since): drop the
        STREAM_CONNECTED its control queues hold for those streams. A client
        that attached while the run replayed (before the replay reached a
        stream's open) connected that stream then (`route`, or `open_ctl` on
        a replayed control fd), but the guest's control reads were the
        journal's, which hold the connect it read before the crash: read
        again live, it would be a second one, which a run without a crash
        never gets. Connects of streams the guest does not hold (never
        opened, or closed again before the crash) stay, and so does every
        event from the first SESSION_CLOSED on: the guest reads that one
        live and closes its streams, so a later session's connects are news."""
        channels = list(held)
        with self._lock:
            holds = {channel.stream_id for channel in channels
                     if self._channels.get(channel.stream_id) is channel}
            if not holds:
                return
            for queue in self._ctl:
                # What the guest reads while still in the journal's session:
                # the events before the first SESSION_CLOSED.
                events = list(queue.events)
                end = next((i for i, (_s, kind) in enumerate(events)
                            if kind == CTL_SESSION_CLOSED), len(events))
                kept = [(stream_id, kind) for stream_id, kind in events[:end]
                        if kind != CTL_STREAM_CONNECTED or stream_id not in holds
                        ] + events[end:]
                if len(kept) != len(events):
                    queue.events.clear()
                    queue.events.extend(kept)

    def end_resumed(self) -> None:
        """A resumed run's journal says the session its reopened streams were
        from has ended (the guest read SESSION_CLOSED): those still waiting
        for a client close, as they did then (EPOLLHUP, EPIPE once empty),
        and the next session starts fresh ones. Streams a client already
        attached to this run uses are its own and stay."""
        with self._lock:
            ended = [self._channels.pop(stream_id) for stream_id in self._resumed
                     if stream_id in self._channels]
            self._resumed.clear()
            for channel in ended:
                channel.state = State.CLOSED
            if ended:
                self._listed = tuple(self._channels.values())
        if ended:
            self.changed()

    def open_ctl(self) -> CtlQueue:
        """A control queue holding what already happened in the current session
        (its streams), or that the last session ended: a guest that opens its
        control fd late still learns of them."""
        queue = CtlQueue(self.limits.max_ctl_events)
        with self._lock:
            if self._session is not None:
                for channel in self._channels.values():
                    if channel.state is State.CONNECTED:
                        queue.push(channel.stream_id, CTL_STREAM_CONNECTED)
            elif self._sessions:
                queue.push(0, CTL_SESSION_CLOSED)
            self._ctl.append(queue)
        return queue

    def close_ctl(self, queue: CtlQueue) -> None:
        with self._lock:
            if queue in self._ctl:
                self._ctl.remove(queue)

    def can_change(self) -> bool:
        """Whether a stream or control fd may still become ready while the guest
        waits: a session is attached or one may still come."""
        if self.ended:
            return False
        return self._session is not None or (
            self._max_sessions is None or self._sessions < self._max_sessions)

    def idle_poll(self) -> None:
        """The guest looked at a readable stream or control fd and found
        nothing: it is waiting for its client (see `wait_guest_idle`)."""
        self._idle_polls += 1
        if self._probing:
            self.room.notify()

    @property
    def has_notes(self) -> bool:
        return bool(self._notes)

    def take_notes(self) -> list[tuple[str, dict[str, Any]]]:
        with self._lock:
            notes = list(self._notes)
            self._notes.clear()
        return notes

    # ---- the client's side (any thread) ------------------------------------------

    def connect(self, client: str = "api") -> Session:
        """Attach a client session; StreamsUnavailable when one is attached,
        the run ended, or max_sessions were used."""
        from spearpy.streams.session import Session

        with self._lock:
            if self.ended:
                raise StreamsUnavailable("the run has ended")
            if self._session is not None:
                raise StreamsUnavailable("a client session is already attached to this run")
            if self._max_sessions is not None and self._sessions >= self._max_sessions:
                raise StreamsUnavailable("this run takes no more client sessions")
            self._sessions += 1
            session = self._session = Session(self, self._sessions, client)
            self._resumed.clear()  # the reopened streams are this session's now
            self.note(STREAM_SESSION, action="open", session=session.id, client=client)
        self.changed()
        return session

    def wait_guest_idle(self, timeout: float | None) -> bool:
        """Whether the guest, woken now, looks at its streams and finds nothing
        to read within `timeout` seconds: it is waiting for input, not working
        on the last one (the stdio bridge's test before it ends a session)."""
        before = self._idle_polls
        with self._lock:
            self._probing += 1
        try:
            self.wake_guest()  # a guest blocked in epoll_wait re-checks readiness now
            return self.wait_room(lambda: self._idle_polls > before or self.ended, timeout)
        finally:
            with self._lock:
                self._probing -= 1

    @property
    def session(self) -> Session | None:
        """The client session attached now, if any."""
        return self._session

    def inbound_pending(self) -> int:
        """Frames the client sent that the guest has not read yet."""
        with self._lock:
            channels = list(self._channels.values())
        return sum(len(c.inbound) for c in channels)

    # ---- used by Session ---------------------------------------------------------

    def note(self, kind: str, **data: Any) -> None:
        """Record something for the guest's thread to emit (hold the lock)."""
        if len(self._notes) >= MAX_NOTES:
            self.notes_dropped += 1
            return
        self._notes.append((kind, data))

    def route(self, session: Session, stream_id: int) -> tuple[Channel | None, bool]:
        """The channel an inbound frame on `stream_id` goes to, and whether this
        frame connects it (a STREAM_CONNECTED event was queued); (None, False)
        when the session is over or at its stream limit."""
        channel = self._channels.get(stream_id)
        if channel is not None and channel.state is not State.INIT and \
                self._session is session:
            return channel, False  # the common case, every frame after the first: no lock
        with self._lock:
            if self._session is not session:
                return None, False
            channel = self._channels.get(stream_id)
            if channel is None:
                if len(self._channels) >= self.limits.max_streams:
                    return None, False
                channel = Channel(stream_id, self.limits, self, State.CONNECTED)
                self._channels[stream_id] = channel
                self._listed = (*self._listed, channel)
            elif channel.state is State.INIT:
                channel.state = State.CONNECTED
            else:
                return channel, False
            for queue in self._ctl:
                queue.push(stream_id, CTL_STREAM_CONNECTED)
            return channel, True

    def channels_of(self, session: Session) -> tuple[Channel, ...]:
        listed = self._listed
        return listed if self._session is session else ()

    def detach(self, session: Session, error: bool) -> list[Channel]:
        """End `session`: its channels close and the guest gets SESSION_CLOSED.
        Returns the channels it had (empty if it was not attached)."""
        with self._lock:
            if self._session is not session:
                return []
            self._session = None
            channels = list(self._channels.values())
            self._channels = {}
            self._listed = ()
            for channel in channels:
                channel.state = State.CLOSED
                channel.error = error
            for queue in self._ctl:
                queue.push(0, CTL_SESSION_CLOSED)
        self.changed()
        return channels

    def close_channel(self, session: Session, stream_id: int) -> None:
        with self._lock:
            channel = self._channels.get(stream_id) if self._session is session else None
            if channel is None or channel.state is State.CLOSED:
                return
            channel.state = State.CLOSED
        self.changed()

    @property
    def lock(self) -> threading.Lock:
        return self._lock
