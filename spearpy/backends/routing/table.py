"""Which route a completion takes and which backends it may go to.

Pure: no backend is built or asked here, no health is read. The order of
precedence, first that applies:

1. the matching routes with `lock = true`, wherever they are in the file:
   the completion goes to the backends every one of them lists (the first
   one's, in its order, less those another leaves out), with the first
   one's policy and model; none in common refuses it. Nothing the guest
   sets (model, aliased model, `backend` param) and no fallback leaves them;
2. the guest's `backend` param (as before routing existed);
3. an alias of the guest's model (the operator said where that model lives);
4. the first matching route;
5. the default backend, unless the guest named a model and `[routing]
   unknown_model = "refuse"`: then no backend (NO_CANDIDATE), as SPEAR
   answers a model no backend is bound to.

Locks come before order because a lock is a promise about where matching
text may go: an earlier unlocked route the guest can steer into (by model,
say) must not break it. `overlap` warns about files that read otherwise.

Aliases rewrite the model before routes are matched, so `match.model` sees
the name the alias gives. Content is scanned once per message and session:
a `SessionScan` remembers how far it got and which routes' content matched,
and a decision for the same (param, model, tools, matches) is memoised, so a
loop iteration costs the new messages' scan and one dict lookup.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from spearpy.backends.routing.matcher import ContentIndex, ContentRule, glob_any, message_text
from spearpy.backends.routing.overlap import lock_warnings
from spearpy.backends.routing.spec import AliasSpec, RouteSpec, RoutingSpec

LOCKED = "locked route"
PARAM = "backend param"
ALIAS = "alias"
ROUTE = "route"
DEFAULT = "default"
NO_CANDIDATE = "no candidate"
_MEMO_LIMIT = 4096


@dataclass(slots=True)
class SessionScan:
    """How much of one session's history the content rules have read."""

    seen: int = 0
    last: object = None  # the last message read: a different list starts over
    hits: int = 0  # bit i: route i's content matched some message
    lock: threading.Lock = field(default_factory=threading.Lock)


@dataclass(frozen=True, slots=True)
class Match:
    """The table's answer: where a completion may go, before health and policy."""

    reason: str  # LOCKED, PARAM, ALIAS, ROUTE, DEFAULT or NO_CANDIDATE
    targets: tuple[str, ...]
    route: RouteSpec | None = None
    alias: str | None = None  # the guest's model name an alias applied to
    alias_spec: AliasSpec | None = None
    model: str | None = None  # the model routes were matched on
    locks: tuple[str, ...] = ()  # LOCKED: every matching locked route, `route` first
    # LOCKED: (backend, the locked route leaving it out) for `route.to` not in `targets`
    excluded: tuple[tuple[str, str], ...] = ()

    @property
    def policy(self) -> str | None:
        return self.route.policy if self.route is not None and self.reason in (LOCKED, ROUTE) \
            else None

    def model_for(self, backend: str, asked: str | None) -> str | None:
        """The model to send to `backend` (None: the backend's own): the
        route's `model`, else the alias's for that backend, else the guest's."""
        if self.route is not None and self.route.model and self.reason in (LOCKED, ROUTE):
            return self.route.model
        spec = self.alias_spec
        if spec is not None and spec.backend == backend:
            return spec.model
        return asked


class RouteTable:
    def __init__(self, spec: RoutingSpec, default: str,
                 default_model_of: Callable[[str], str | None]) -> None:
        """`default_model_of(name)`: a backend's own model, for aliases that
        name none (and for matching when the guest set no model)."""
        self.spec = spec
        self.default = default
        self.routes = spec.routes
        self._content = [ContentRule(r.match.content) if r.match.content else None
                         for r in spec.routes]
        self._index = ContentIndex([(1 << i, rule) for i, rule in enumerate(self._content)
                                    if rule is not None])
        self._has_content = any(rule is not None for rule in self._content)
        self._default_model_of = default_model_of
        self._memo: dict[tuple[str, str | None, str | None, bool, int], Match] = {}
        self.warnings = lock_warnings(spec.routes)

    def scan(self, messages: Sequence[Any], state: SessionScan) -> int:
        """Read the messages `state` has not seen yet; the routes whose content matched."""
        if not self._has_content:
            return 0
        with state.lock:
            start = state.seen
            if start > len(messages) or (start and messages[start - 1] is not state.last):
                start, state.hits = 0, 0  # not the history this state read
            hits, index = state.hits, self._index
            for message in messages[start:]:
                text = message_text(message)
                if text is not None:  # "" too: a pattern may match the empty string
                    hits = index.hits(text, hits)
            if messages:
                state.last = messages[-1]
            state.seen, state.hits = len(messages), hits
            return hits

    def decide(self, requested: str, asked: str | None, fallback_model: str | None,
               has_tools: bool, hits: int) -> Match:
        """`requested`: the guest's `backend` param ("" when unset); `asked`:
        its model param; `fallback_model`: the model it gets when it asked
        for none; `hits` from `scan`."""
        key = (requested, asked, fallback_model, has_tools, hits)
        found = self._memo.get(key)
        if found is None:
            found = self._decide(requested, asked, fallback_model, has_tools, hits)
            if len(self._memo) >= _MEMO_LIMIT:
                self._memo.clear()
            self._memo[key] = found
        return found

    def _decide(self, requested: str, asked: str | None, fallback_model: str | None,
                has_tools: bool, hits: int) -> Match:
        alias_spec = self.spec.aliases.get(asked) if asked else None
        model = self.matched_model(asked, alias_spec, fallback_model)
        holding = [r for i, r in enumerate(self.routes)
                   if self._holds(i, r, requested, model, has_tools, hits)]
        alias = asked if alias_spec is not None else None
        common: dict[str, Any] = {"alias": alias, "alias_spec": alias_spec, "model": model}
        locks = [r for r in holding if r.lock]
        if locks:
            return _locked(locks, common)
        if requested:
            return Match(PARAM, (requested,), **common)
        if alias_spec is not None:
            return Match(ALIAS, (alias_spec.backend,), **common)
        if holding:
            return Match(ROUTE, tuple(holding[0].to), holding[0], **common)
        if asked and self.spec.refuse_unknown_models:
            return Match(NO_CANDIDATE, (), **common)
        return Match(DEFAULT, (self.default,), **common)

    def matched_model(self, asked: str | None, alias_spec: AliasSpec | None,
                      fallback_model: str | None) -> str | None:
        if alias_spec is not None:
            return alias_spec.model or self._default_model_of(alias_spec.backend) or asked
        return asked or fallback_model

    def _holds(self, index: int, route: RouteSpec, requested: str, model: str | None,
               has_tools: bool, hits: int) -> bool:
        match = route.match
        if match.tools is not None and match.tools != has_tools:
            return False
        if match.model and not glob_any(match.model, model or ""):
            return False
        if match.backend and not glob_any(match.backend, requested):
            return False
        return not match.content or bool(hits & (1 << index))

    def why_not(self, index: int, requested: str, model: str | None, has_tools: bool,
                hits: int) -> str | None:
        """Why route `index` did not match (None: it did), for explanations."""
        match = self.routes[index].match
        if match.tools is not None and match.tools != has_tools:
            return f"tools is {str(has_tools).lower()}, the route wants {str(match.tools).lower()}"
        if match.model and not glob_any(match.model, model or ""):
            return f"model {model!r} matches none of {match.model}"
        if match.backend and not glob_any(match.backend, requested):
            return f"backend param {requested!r} matches none of {match.backend}"
        if match.content and not hits & (1 << index):
            return f"no user or tool message matches {match.content}"
        return None

    def content_evidence(self, index: int, messages: Sequence[Any]) -> str | None:
        """Which pattern of route `index` matched which message (explanations)."""
        rule = self._content[index]
        if rule is None:
            return None
        for number, message in enumerate(messages):
            text = message_text(message)
            pattern = rule.first_match(text) if text is not None else None
            if pattern is not None:
                return f"{pattern!r} in message {number} ({message.get('role')})"
        return None


def _locked(locks: Sequence[RouteSpec], common: dict[str, Any]) -> Match:
    """The backends every matching locked route allows, in the first's order:
    each lock's promise holds, whichever came first in the file."""
    first, others = locks[0], locks[1:]
    targets: list[str] = []
    excluded: list[tuple[str, str]] = []
    for name in first.to:
        outside = next((r.name for r in others if name not in r.to), None)
        if outside is None:
            targets.append(name)
        else:
            excluded.append((name, outside))
    return Match(LOCKED, tuple(targets), first, locks=tuple(r.name for r in locks),
                 excluded=tuple(excluded), **common)
