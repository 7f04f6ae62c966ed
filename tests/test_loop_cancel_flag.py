"""Interrupts.run_reason reads a threading.Event's flag without its is_set()
call (issue 19, P5): it answers what is_set() answers, for an Event set on
this thread or another, and asks is_set() of anything else."""

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


def test_an_event_subclass_is_asked_through_is_set() -> None:
    class Always(threading.Event):
        def is_set(self) -> bool:
            return True

    stops = Interrupts(timeout=None, tool_timeout=None, cancel=Always())
    reason = stops.run_reason()
    assert reason is not None and reason[0] is Outcome.CANCELLED


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
