"""Events: plain values describing what a run did, delivered to sinks in order.

A sink is any callable taking an Event. Sinks run on the guest's thread, inside
the hostcall, so they must be quick; an exception in a sink is reported once
and never reaches the guest.

Event.data holds only sizes, counts, codes and timings: safe to write anywhere.
What a tool was given and returned, and a closed session's transcript, travel
in Event.content, which `as_dict` leaves out; a sink copies it out only when
its owner asked for content (`--log-content`, `--transcript`).
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

SEND_START = "send_start"
COMPLETION_START = "completion_start"
COMPLETION_END = "completion_end"
# A text delta of a streamed completion (content: {"text"}), between its
# completion_start and completion_end.
TOKEN = "token"
TOOL_START = "tool_start"
TOOL_END = "tool_end"
LIMIT_HIT = "limit_hit"
# A tool source (an MCP server) could not offer its tools for a send; the
# send goes on without them. data: source, server, reason.
SOURCE_UNAVAILABLE = "source_unavailable"
SEND_END = "send_end"
SESSION_CLOSE = "session_close"
RUN_START = "run_start"
RUN_END = "run_end"
# User streams (spearpy.streams), emitted on the guest's thread. stream_open /
# stream_close: a guest stream fd (fd, stream_id, direction; close adds
# frames/bytes read and written, eagain_writes, reason guest|run_end).
STREAM_OPEN = "stream_open"
STREAM_CLOSE = "stream_close"
# A client session (action open|close, session, client ws|stdio|api; close
# adds reason, error, streams, frames_in/bytes_in from the client,
# frames_out/bytes_out from the guest, paused: frames the client was held back on).
STREAM_SESSION = "stream_session"
# The first -EAGAIN of a guest write episode (at most one a second per fd).
STREAM_BACKPRESSURE = "stream_backpressure"
# Frames dropped (reason client_gone: written but never taken; malformed: a
# client frame that closed its session).
STREAM_DROP = "stream_drop"
# A microphone or realtime ASR fd closed (reason guest|run_end): device
# mic|rtasr, its counts, and last_error (why a device failed; the guest only
# sees ERR readiness and must ask get-status for it).
AUDIO_CLOSE = "audio_close"

KINDS = (RUN_START, SEND_START, COMPLETION_START, TOKEN, COMPLETION_END, TOOL_START, TOOL_END,
         LIMIT_HIT, SOURCE_UNAVAILABLE, SEND_END, SESSION_CLOSE, RUN_END, STREAM_OPEN,
         STREAM_CLOSE, STREAM_SESSION, STREAM_BACKPRESSURE, STREAM_DROP, AUDIO_CLOSE)


@dataclass(frozen=True, slots=True)
class Event:
    kind: str
    run_id: str
    seq: int
    ts: float
    fd: int | None = None
    data: dict[str, Any] = field(default_factory=dict)
    # tool_start: {"arguments": str}; tool_end: {"output": str}; token: {"text": str};
    # session_close: {"transcript": dict}. Never part of as_dict().
    content: dict[str, Any] | None = field(default=None, repr=False, compare=False)

    def as_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "run_id": self.run_id, "seq": self.seq, "ts": self.ts,
                "fd": self.fd, **self.data}

    def __reduce__(self) -> tuple[type[Event], tuple[Any, ...]]:
        # Events cross from worker processes one pickle each: a slotted
        # dataclass's own state functions call dataclasses.fields() on both
        # sides, a third of the service's unpickling time (bench SV).
        return Event, (self.kind, self.run_id, self.seq, self.ts, self.fd, self.data,
                       self.content)


EventSink = Callable[[Event], None]


class _OnceReporter:
    """Logs the first failure of each sink, then stays quiet about it."""

    def __init__(self) -> None:
        self._failed: set[int] = set()
        self._lock = threading.Lock()

    def report(self, index: int, sink: object) -> None:
        with self._lock:
            if index in self._failed:
                return
            self._failed.add(index)
        from spearpy.observe.logger import get_logger

        get_logger("spearpy").exception("event sink failed", sink=repr(sink))


def _deliver(sinks: Iterable[EventSink], event: Event, reporter: _OnceReporter) -> None:
    for index, sink in enumerate(sinks):
        try:
            sink(event)
        except Exception:
            reporter.report(index, sink)


class EventBus:
    """Per-run ordered event stream."""

    __slots__ = ("_counter", "_reporter", "run_id", "sinks")

    def __init__(self, run_id: str, sinks: list[EventSink] | None = None) -> None:
        self.run_id = run_id
        self.sinks: list[EventSink] = list(sinks or [])
        self._counter = itertools.count()
        self._reporter = _OnceReporter()

    @property
    def active(self) -> bool:
        return bool(self.sinks)

    def emit(self, kind: str, fd: int | None = None, *, content: dict[str, Any] | None = None,
             **data: Any) -> None:
        if not self.sinks:
            return
        event = Event(kind, self.run_id, next(self._counter), time.time(), fd, data, content)
        _deliver(self.sinks, event, self._reporter)


class FanOut:
    """Several sinks as one (Host.run takes a single `on_event`); each sink is
    isolated from the others' failures, as on the EventBus."""

    def __init__(self, *sinks: EventSink) -> None:
        self.sinks: list[EventSink] = list(sinks)
        self._reporter = _OnceReporter()

    def add(self, sink: EventSink) -> None:
        self.sinks.append(sink)

    def __call__(self, event: Event) -> None:
        _deliver(self.sinks, event, self._reporter)
