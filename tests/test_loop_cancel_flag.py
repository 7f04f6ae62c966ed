"""Interrupts.run_reason sees the run's cancel event as it is now: set on
another thread, cleared, replaced; and a noted reason comes before it."""

from __future__ import annotations

import threading

from spearpy.interrupts import Interrupts
from spearpy.outcome import Outcome


def test_a_plain_event_is_seen_as_is_set_sees_it() -> None:
    event = threading.Event()
    stops = Interrupts(timeout=None, tool_timeout=None, cancel=event)
    assert stops.run_reason() is None
    setter = threading.Thread(target=event.set)
    setter.start()
    setter.join()
    assert event.is_set()
    reason = stops.run_reason()
    assert reason is not None and reason[0] is Outcome.CANCELLED
    event.clear()
    assert stops.run_reason() is None


def test_a_replaced_cancel_event_is_the_one_read() -> None:
    stops = Interrupts(timeout=None, tool_timeout=None)
    replacement = threading.Event()
    stops.cancel_event = replacement
    assert stops.run_reason() is None
    replacement.set()
    reason = stops.run_reason()
    assert reason is not None and reason[0] is Outcome.CANCELLED


def test_a_noted_reason_comes_before_the_cancel() -> None:
    stops = Interrupts(timeout=None, tool_timeout=None)
    stops.cancel("memory_limit", "over")
    reason = stops.run_reason()
    assert reason is not None and reason[0] is Outcome.MEMORY_LIMIT
