"""A backend made of backends: every completion routed anew, with fallback.

`Router` belongs to a host: its route table, the health of every backend and
the policies' counters are shared by all sessions. `Router.session_backend`
gives each send a `RoutedBackend` (the Backend protocol), so the tool loop
still sees one backend per completion; each `complete` decides (table), picks
an order (policy, health), then asks the backends in that order, moving on
after a failure routing falls back on (no connection, timeout, 429, 5xx:
after that backend's own retries) and stopping at any other answer.

Each completion leaves a routing record (`RoutedBackend.last_record`, and
per session for transcripts): the route, why, the policy, the candidates,
those rejected and why, the backend that answered and the fallbacks tried.
"""

from __future__ import annotations

import logging
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from spearpy.backends.routing.health import HealthBoard
from spearpy.backends.routing.policy import PolicyState
from spearpy.backends.routing.spec import RoutingSpec
from spearpy.backends.routing.table import (
    LOCKED,
    NO_CANDIDATE,
    ROUTE,
    Match,
    RouteTable,
    SessionScan,
)
from spearpy.chat.protocol import CompletionResult, UpstreamError

if TYPE_CHECKING:
    from spearpy.backends.base import Backend, CompletionRequest

Lookup = Callable[[str], "tuple[Backend | None, str | None]"]
log = logging.getLogger("spearpy.routing")
ROUTE_UNAVAILABLE = "route_unavailable"
NO_CANDIDATE_BACKEND = "no_candidate_backend"  # SPEAR's code for a model no backend serves
_UNREACHABLE = frozenset({"upstream_unreachable", "upstream_timeout", "upstream_protocol_error"})
# Not the backend's fault: they say nothing of its health.
_NEUTRAL = frozenset({"cancelled", "deadline_exceeded", "replay_mismatch"})


def falls_back(error: UpstreamError) -> bool:
    """Whether another backend should get the completion after this error."""
    if error.code in _UNREACHABLE:
        return True
    status = error.status
    return error.code == "upstream_http_error" and status is not None and \
        (status == 429 or status >= 500)


@dataclass(slots=True)
class SessionRouting:
    scan: SessionScan = field(default_factory=SessionScan)
    records: list[dict[str, Any]] = field(default_factory=list)


@dataclass(slots=True)
class Plan:
    match: Match
    order: list[str]  # backends to try, first the choice
    rejected: list[dict[str, str]]
    by_route: bool  # a route chose: health applies and failures fall back


class Router:
    def __init__(self, spec: RoutingSpec, default: str, lookup: Lookup,
                 default_model_of: Callable[[str], str | None], *,
                 known: Callable[[str], bool] | None = None,
                 follow: Callable[[], str | None] | None = None,
                 clock: Callable[[], float] = time.monotonic, quiet: bool = False) -> None:
        """`lookup(name)`: (the backend, None) or (None, why not); `known`:
        whether a name is configured (a replay holds only the backends its
        run used); `follow()`: the backend of the next recorded exchange, when
        replaying, so a replay routes as the recorded run did; `quiet`: the
        caller shows the table's warnings itself (else they are logged)."""
        self.table = RouteTable(spec, default, default_model_of)
        if not quiet:
            for warning in self.table.warnings:
                log.warning("routing: %s", warning)
        self.health = HealthBoard(spec.breaker, clock)
        self.policies = PolicyState()
        self._lookup = lookup
        self._known = known
        self._follow = follow
        self._lock = threading.Lock()
        self._sessions: weakref.WeakKeyDictionary[object, SessionRouting] = \
            weakref.WeakKeyDictionary()

    # ---- per send -----------------------------------------------------------

    def session_backend(self, requested: object, asked: object,
                        session: object | None = None) -> tuple[Backend | None, str | None]:
        """The backend a send uses: the guest's `backend` param is checked
        as before routing existed (an unknown name is the send's error)."""
        name = requested if isinstance(requested, str) else ""
        base, error = self._lookup(name)
        if base is None:
            return None, error
        return RoutedBackend(self, name, asked if isinstance(asked, str) and asked else None,
                             base, self.session_state(session)), None

    def session_state(self, session: object | None) -> SessionRouting:
        if session is None:
            return SessionRouting()
        with self._lock:
            try:
                state = self._sessions.get(session)
                if state is None:
                    state = self._sessions[session] = SessionRouting()
            except TypeError:  # not weakly referenceable: routed, but nothing kept
                return SessionRouting()
            return state

    def records(self, session: object) -> list[dict[str, Any]]:
        """The routing records of a session's completions, in order."""
        with self._lock:
            try:
                state = self._sessions.get(session)
            except TypeError:
                state = None
        return list(state.records) if state is not None else []

    # ---- deciding -----------------------------------------------------------

    def plan(self, requested: str, asked: str | None, fallback_model: str | None,
             messages: Sequence[Any], has_tools: bool, scan: SessionScan) -> Plan:
        hits = self.table.scan(messages, scan)
        match = self.table.decide(requested, asked, fallback_model, has_tools, hits)
        if match.reason not in (LOCKED, ROUTE) or match.route is None:
            return Plan(match, list(match.targets), [], False)
        usable: list[str] = []
        rejected = [{"backend": name, "reason": f"outside locked route {lock!r}"}
                    for name, lock in match.excluded]
        for name in match.targets:
            if self._known is not None and not self._known(name):
                rejected.append({"backend": name, "reason": "not configured here"})
            elif self._follow is None and (why := self.health.blocked(name)) is not None:
                rejected.append({"backend": name, "reason": why})
            else:
                usable.append(name)
        order = self.policies.order(match.route, usable, self.health)
        hinted = self._follow() if self._follow is not None else None
        if hinted is not None and hinted in order:
            order.remove(hinted)
            order.insert(0, hinted)
        return Plan(match, order, rejected, True)

    # ---- asking -------------------------------------------------------------

    def complete(self, requested: str, asked: str | None, fallback_model: str | None,
                 request: CompletionRequest, state: SessionRouting,
                 ) -> tuple[CompletionResult, dict[str, Any]]:
        started = time.monotonic()
        plan = self.plan(requested, asked, fallback_model, request.messages,
                         bool(request.tools), state.scan)
        rejected = list(plan.rejected)
        tried: list[dict[str, Any]] = []
        result: CompletionResult | None = None
        chosen: str | None = None
        for name in plan.order:
            if result is not None and _stopped(request):
                break
            backend, error = self._lookup(name)
            if backend is None:
                rejected.append({"backend": name, "reason": error or "cannot start"})
                continue
            admitted = self.health.begin(name, check=plan.by_route and self._follow is None)
            if isinstance(admitted, str):
                rejected.append({"backend": name, "reason": admitted})
                continue
            model = plan.match.model_for(name, asked) or backend.default_model or \
                _sole_model(backend) or request.model
            try:
                result = backend.complete(request if model == request.model
                                          else replace(request, model=model))
            except BaseException:
                self.health.end(name, None, trial=admitted)
                raise
            err = result.error
            failed = err is not None and falls_back(err)
            neutral = err is not None and err.code in _NEUTRAL
            self.health.end(name, None if neutral else not failed, result.latency_ms,
                            trial=admitted)
            if not failed or not plan.by_route:
                chosen = None if failed else name
                break
            tried.append({"backend": name, "error": err.code if err else None,
                          "status": err.status if err else None})
        if result is None and plan.match.reason == NO_CANDIDATE:
            result = self._no_candidate(asked or request.model)
        elif result is None:
            result = _unavailable(plan, rejected, request.model)
        elif tried:
            result = CompletionResult(result.backend, result.model, result.body, result.error,
                                      (time.monotonic() - started) * 1000.0)
        record = _record(plan, rejected, tried, chosen, result)
        state.records.append(record)
        return result, record


    def _no_candidate(self, model: str) -> CompletionResult:
        available = self.table.spec.known_models()
        return CompletionResult("", model, error=UpstreamError(
            NO_CANDIDATE_BACKEND,
            f"no backend serves model {model!r}; available models: "
            f"{', '.join(available) or 'none'} (or name a backend with the `backend` param)",
            details={"available_models": available}))


class RoutedBackend:
    """What one send of a routed host talks to (the Backend protocol)."""

    def __init__(self, router: Router, requested: str, asked: str | None, base: Backend,
                 state: SessionRouting) -> None:
        self.name = base.name
        self.default_model = base.default_model
        self.last_record: dict[str, Any] | None = None
        self._router = router
        self._base = base
        self._requested = requested
        self._asked = asked
        self._state = state

    def complete(self, request: CompletionRequest) -> CompletionResult:
        result, self.last_record = self._router.complete(
            self._requested, self._asked, self.default_model or None, request, self._state)
        return result

    def sole_model(self) -> str | None:
        """The only model the default (or asked-for) backend's server lists,
        for a send that names none (see the driver)."""
        return _sole_model(self._base)

    def close(self) -> None:
        """Nothing: the host owns and closes the backends routed to."""


def route_record(backend: object) -> dict[str, Any] | None:
    """The routing record of the last completion of a routed backend, else None."""
    return backend.last_record if isinstance(backend, RoutedBackend) else None


def _sole_model(backend: object) -> str | None:
    # Servers that serve one model say which on /models (OpenAIBackend asks
    # once); other backends have no such method.
    ask = getattr(backend, "sole_model", None)
    model = ask() if callable(ask) else None
    return model if isinstance(model, str) and model else None


def _stopped(request: CompletionRequest) -> bool:
    if request.cancel is not None and request.cancel.is_set():
        return True
    return request.deadline is not None and time.monotonic() >= request.deadline


def _unavailable(plan: Plan, rejected: list[dict[str, str]], model: str) -> CompletionResult:
    route = plan.match.route
    reasons = "; ".join(f"{r['backend']}: {r['reason']}" for r in rejected) or "none listed"
    where = f"route {route.name!r}" if route is not None else "the routed backend"
    return CompletionResult(plan.match.targets[0] if plan.match.targets else "", model,
                            error=UpstreamError(ROUTE_UNAVAILABLE,
                                                f"{where}: no backend can take the completion "
                                                f"({reasons})"))


def _record(plan: Plan, rejected: list[dict[str, str]], tried: list[dict[str, Any]],
            chosen: str | None, result: CompletionResult) -> dict[str, Any]:
    match = plan.match
    if result.error is None:
        outcome = "fallback" if tried else "ok"
    else:
        outcome = "unavailable" if result.error.code in (ROUTE_UNAVAILABLE,
                                                          NO_CANDIDATE_BACKEND) else "error"
    return {
        "route": match.route.name if match.route is not None and plan.by_route else None,
        "reason": match.reason, "policy": match.policy, "model": match.model,
        "alias": match.alias, "candidates": list(match.targets), "order": plan.order,
        "rejected": rejected, "chosen": chosen, "tried": tried, "outcome": outcome,
    }  # fmt: skip
