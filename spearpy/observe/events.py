"""Events: plain values describing what a run did, delivered to sinks in order.

A sink is any callable taking an Event. Sinks run on the guest's thread, inside
the hostcall, so they must be quick; an exception in a sink is reported once
and never reaches the guest.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

SEND_START = "send_start"
COMPLETION_START = "completion_start"
COMPLETION_END = "completion_end"
TOOL_START = "tool_start"
TOOL_END = "tool_end"
LIMIT_HIT = "limit_hit"
SEND_END = "send_end"
RUN_START = "run_start"
RUN_END = "run_end"


@dataclass(frozen=True, slots=True)
class Event:
    kind: str
    run_id: str
    seq: int
    ts: float
    fd: int | None = None
    data: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "run_id": self.run_id, "seq": self.seq, "ts": self.ts,
                "fd": self.fd, **self.data}


EventSink = Callable[[Event], None]


class EventBus:
    """Per-run ordered event stream."""

    __slots__ = ("_counter", "_failed", "run_id", "sinks")

    def __init__(self, run_id: str, sinks: list[EventSink] | None = None) -> None:
        self.run_id = run_id
        self.sinks: list[EventSink] = list(sinks or [])
        self._counter = itertools.count()
        self._failed: set[int] = set()

    @property
    def active(self) -> bool:
        return bool(self.sinks)

    def emit(self, kind: str, fd: int | None = None, **data: Any) -> None:
        if not self.sinks:
            return
        event = Event(kind, self.run_id, next(self._counter), time.time(), fd, data)
        for index, sink in enumerate(self.sinks):
            try:
                sink(event)
            except Exception:  # noqa: BLE001 - observers must not break the guest
                if index not in self._failed:
                    self._failed.add(index)
                    import structlog

                    structlog.get_logger("spearpy").exception("event sink failed",
                                                              sink=repr(sink))
