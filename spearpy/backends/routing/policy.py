"""The order a route's usable backends are tried in.

Every policy orders all of them: the first is the choice, the rest are
where a failure routing falls back on goes next.

- priority: as listed in `to`;
- round_robin: as listed, rotated one place per completion of the route;
- weighted: smooth weighted round-robin (nginx's): over any run of
  sum(weights) completions each backend comes first exactly its weight's
  share of the time, interleaved, and deterministically, so a recorded run
  replays the same way; the rest follow by weight;
- least_inflight: fewest requests in flight first (ties as listed);
- ewma_latency: lowest moving-average latency first; a backend not yet
  measured counts as fastest, so each gets measured once.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

from spearpy.backends.routing.health import HealthBoard
from spearpy.backends.routing.spec import RouteSpec


class PolicyState:
    """Per-route counters of the rotating policies; shared by a host's sessions."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._turns: dict[str, int] = {}
        self._current: dict[str, dict[str, float]] = {}

    def order(self, route: RouteSpec, usable: Sequence[str], health: HealthBoard) -> list[str]:
        policy = route.policy
        if len(usable) <= 1 or policy == "priority":
            return list(usable)
        if policy == "round_robin":
            with self._lock:
                turn = self._turns.get(route.name, 0)
                self._turns[route.name] = turn + 1
            shift = turn % len(usable)
            return [*usable[shift:], *usable[:shift]]
        if policy == "weighted":
            return self._weighted(route, usable)
        if policy == "least_inflight":
            load = {name: health.inflight(name) for name in usable}
            return sorted(usable, key=lambda name: load[name])
        # ewma_latency
        latency = {name: health.ewma_ms(name) for name in usable}
        return sorted(usable, key=lambda name: latency[name] or 0.0)

    def _weighted(self, route: RouteSpec, usable: Sequence[str]) -> list[str]:
        weights = dict(zip(route.to, route.weights or [1.0] * len(route.to), strict=True))
        total = sum(weights[name] for name in usable)
        with self._lock:
            current = self._current.setdefault(route.name, {})
            for name in usable:
                current[name] = current.get(name, 0.0) + weights[name]
            first = max(usable, key=lambda name: current[name])
            current[first] -= total
        rest = sorted((n for n in usable if n != first), key=lambda n: -weights[n])
        return [first, *rest]
