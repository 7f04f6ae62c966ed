"""What the router knows about each backend: its circuit, its requests in
flight and its recent latency. Shared by every session of a host.

A circuit opens after `failures` consecutive failures (the errors routing
falls back on: no connection, timeouts, 429, 5xx). While open, routes skip
the backend. After `cooldown` seconds one trial request is let through
(half-open): success closes the circuit, failure opens it for another
cool-down. Any answer from the server that is not such a failure (a 400
included: the server is up) counts as a success.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from spearpy.backends.routing.spec import BreakerSpec

# Weight of the newest latency in the moving average: a backend that slows
# down is noticed within a few requests, one slow request does not dominate.
EWMA_ALPHA = 0.3


@dataclass(slots=True)
class _State:
    failures: int = 0  # consecutive
    opened_at: float | None = None
    trial: bool = False  # a half-open trial request is in flight
    inflight: int = 0
    ewma_ms: float | None = None


class HealthBoard:
    def __init__(self, breaker: BreakerSpec | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.breaker = breaker or BreakerSpec()
        self._clock = clock
        self._lock = threading.Lock()
        self._states: dict[str, _State] = {}

    def _state(self, name: str) -> _State:
        state = self._states.get(name)
        if state is None:
            state = self._states[name] = _State()
        return state

    def blocked(self, name: str) -> str | None:
        """Why a route must skip `name` now, or None (closed, or half-open
        with no trial in flight)."""
        with self._lock:
            return self._blocked(self._state(name))

    def _blocked(self, state: _State) -> str | None:
        if state.opened_at is None:
            return None
        left = state.opened_at + self.breaker.cooldown - self._clock()
        if left > 0:
            return (f"circuit open after {state.failures} consecutive failures; "
                    f"half-open in {left:.1f} s")
        if state.trial:
            return "circuit half-open: its trial request is in flight"
        return None

    def begin(self, name: str, *, check: bool) -> str | bool:
        """Count a request to `name` as started. With `check`, refuse it when
        the circuit is open: the reason (a str). Else whether it is the
        half-open circuit's trial request, to hand back to `end`."""
        with self._lock:
            state = self._state(name)
            trial = False
            if check:
                why = self._blocked(state)
                if why is not None:
                    return why
                trial = state.trial = state.opened_at is not None
            state.inflight += 1
            return trial

    def end(self, name: str, ok: bool | None, latency_ms: float | None = None, *,
            trial: bool = False) -> None:
        """`ok`: True success, False a failure routing falls back on, None
        neither (cancelled before an answer)."""
        with self._lock:
            state = self._state(name)
            state.inflight = max(0, state.inflight - 1)
            if trial:
                state.trial = False
            if ok is None:
                return
            if ok:
                state.failures, state.opened_at = 0, None
                if latency_ms is not None:
                    previous = state.ewma_ms
                    state.ewma_ms = latency_ms if previous is None else \
                        EWMA_ALPHA * latency_ms + (1 - EWMA_ALPHA) * previous
                return
            state.failures += 1
            if trial or state.failures >= self.breaker.failures:
                state.opened_at = self._clock()

    def inflight(self, name: str) -> int:
        with self._lock:
            return self._state(name).inflight

    def ewma_ms(self, name: str) -> float | None:
        with self._lock:
            return self._state(name).ewma_ms

    def snapshot(self) -> dict[str, dict[str, object]]:
        """Every known backend's state (for explanations and tests)."""
        with self._lock:
            return {name: {"failures": s.failures, "open": self._blocked(s) is not None,
                           "inflight": s.inflight, "ewma_ms": s.ewma_ms}
                    for name, s in self._states.items()}
