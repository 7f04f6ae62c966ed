"""The ToolLoop's states and the only legal moves between them.

As in h11's `_state.py`, the transitions are one explicit table: the loop
changes state only through `next_state`, so a move the table does not list
is a bug that fails loudly instead of leaving a send half-updated. The states
mirror the classic agent FSM: thinking (a completion is due or awaited),
acting (the reply's tool calls are being answered), and three ends.
"""

from __future__ import annotations

from enum import Enum
from typing import Final

from spearpy.errors import SpearpyError


class LoopProtocolError(SpearpyError, RuntimeError):
    """The driver broke the protocol (a result nobody asked for, a reused loop)."""


class LoopState(Enum):
    # Members are singletons compared by identity: the identity hash agrees
    # with that and, unlike Enum's hash of the name, costs no Python call on
    # the two table lookups of every loop iteration.
    __hash__ = object.__hash__

    THINKING = "thinking"  # the next step is (or awaits) a completion
    ACTING = "acting"  # tool calls of the last reply are being answered
    COMPLETED = "completed"
    FAILED = "failed"
    INTERRUPTED = "interrupted"


class LoopEvent(Enum):
    __hash__ = object.__hash__  # as LoopState's

    CALLS_RECEIVED = "calls_received"
    CALLS_ANSWERED = "calls_answered"
    # A call the host's approval policy holds for the guest: the send ends
    # with it (and the calls after it) pending, as a plain send would.
    HELD = "held"
    FINISHED = "finished"
    FAIL = "fail"
    INTERRUPT = "interrupt"


TRANSITIONS: Final[dict[LoopState, dict[LoopEvent, LoopState]]] = {
    LoopState.THINKING: {
        LoopEvent.CALLS_RECEIVED: LoopState.ACTING,
        LoopEvent.FINISHED: LoopState.COMPLETED,
        LoopEvent.FAIL: LoopState.FAILED,
        LoopEvent.INTERRUPT: LoopState.INTERRUPTED,
    },
    LoopState.ACTING: {
        LoopEvent.CALLS_ANSWERED: LoopState.THINKING,
        LoopEvent.HELD: LoopState.COMPLETED,
        LoopEvent.FAIL: LoopState.FAILED,
        LoopEvent.INTERRUPT: LoopState.INTERRUPTED,
    },
    # The ends: nothing leaves them.
    LoopState.COMPLETED: {},
    LoopState.FAILED: {},
    LoopState.INTERRUPTED: {},
}


def next_state(state: LoopState, event: LoopEvent) -> LoopState:
    try:
        return TRANSITIONS[state][event]
    except KeyError:
        raise LoopProtocolError(f"no transition for {event.value} in {state.value}") from None
