"""One run's events to any number of subscribers, live, with replay.

Lives on the event loop: the run's thread hands events over with
`loop.call_soon_threadsafe` (after the store committed them, and once
someone follows the run), so a channel is only ever changed by one thread
and needs no lock. Subscribers do not
own queues: each keeps a cursor (the last seq it sent) and reads what is
newer from the channel's buffer, so a slow subscriber never makes the
service hold more than the buffer. Anything older than the buffer (a late
subscriber of a long run, a resume from an old Last-Event-ID, every
subscriber of an ended run) comes from the store, which has every event the
channel ever had, a page at a time: a subscriber holds one page while it
waits for its client, never the run.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable

from spearpy.serve.store import EventRow

# Reads a page of one run's events from the store: (after, before) -> rows in
# seq order, the next of them after the last; empty once there are none.
StoreReader = Callable[[int, int | None], Awaitable[list[EventRow]]]


class Channel:
    def __init__(self, buffer: int) -> None:
        self._rows: deque[EventRow] = deque(maxlen=buffer)
        self._wake = asyncio.Event()
        self.ended = False
        self.subscribers = 0
        # Until someone follows the run, its events are only stored, not
        # published (runs.py): most runs are never watched, and each publish
        # was a wake-up of the event loop, which under load waits for the GIL
        # behind the guests. Set once, never cleared: the buffer then holds
        # every event from its first on, with no gap. Read from the store's
        # writer thread.
        self.followed = False

    def publish(self, rows: list[EventRow], ended: bool = False) -> None:
        self._rows.extend(rows)
        self.ended = self.ended or ended
        # Wake every waiting subscriber at once; later waiters get a fresh Event.
        self._wake.set()
        self._wake = asyncio.Event()

    def first_seq(self) -> int | None:
        return self._rows[0][0] if self._rows else None

    def after(self, cursor: int) -> list[EventRow]:
        return [row for row in self._rows if row[0] > cursor]

    async def changed(self, timeout: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._wake.wait(), timeout)


class Hub:
    """The channels of the runs in progress, by run id."""

    def __init__(self, buffer: int) -> None:
        self._buffer = buffer
        self._channels: dict[str, Channel] = {}

    def open(self, run_id: str) -> Channel:
        channel = self._channels[run_id] = Channel(self._buffer)
        return channel

    def publish(self, run_id: str, rows: list[EventRow], ended: bool = False) -> None:
        channel = self._channels.get(run_id)
        if channel is None:
            return
        channel.publish(rows, ended)
        if ended:
            # Subscribers keep their reference and drain it; new ones read the store.
            del self._channels[run_id]

    def get(self, run_id: str) -> Channel | None:
        return self._channels.get(run_id)

    @property
    def subscribers(self) -> int:
        return sum(channel.subscribers for channel in self._channels.values())


async def follow(channel: Channel | None, read_store: StoreReader, cursor: int,
                 keepalive: float = 15.0) -> AsyncIterator[EventRow | None]:
    """The run's events after `cursor`, in order, ending after the run's end
    event. Yields None when `keepalive` seconds pass without one (the caller
    sends an SSE comment so proxies keep the connection)."""
    if channel is None:  # the run is over: everything is in the store
        while rows := await read_store(cursor, None):
            for row in rows:
                cursor = row[0]
                yield row
        return
    channel.subscribers += 1
    channel.followed = True
    try:
        if channel.first_seq() is None:
            # Nothing published yet: what was committed before anyone
            # followed is in the store. Set before this read, `followed`
            # has every event committed after it published.
            while rows := await read_store(cursor, None):
                for row in rows:
                    cursor = row[0]
                    yield row
                if channel.first_seq() is not None:
                    break  # published meanwhile: the buffer goes on from here
        while True:
            first = channel.first_seq()
            if first is not None and cursor + 1 < first:
                # Older than the buffer: committed before it was published.
                rows = await read_store(cursor, first)
                for row in rows:
                    cursor = row[0]
                    yield row
                if not rows:
                    # The store lacks them (the disk refused their writes):
                    # go on from the buffer rather than ask again forever.
                    cursor = first - 1
                continue  # the next page, or the buffer moved on during the read
            rows = channel.after(cursor)
            for row in rows:
                cursor = row[0]
                yield row
            if rows:
                continue
            if channel.ended:
                return
            await channel.changed(keepalive)
            if not channel.after(cursor) and not channel.ended:
                yield None
    finally:
        channel.subscribers -= 1


def sse_message(row: EventRow) -> bytes:
    # No `event:` name: EventSource hands named events only to listeners
    # registered for that name, and a client must see kinds it does not know
    # yet (the record carries its kind). json.dumps never writes a newline.
    seq, _kind, record = row
    return f"id: {seq}\ndata: {record}\n\n".encode()
