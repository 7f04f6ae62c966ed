"""Which routes can match the same completion, for the warnings a config
gets when it is loaded.

Locks are decided before order (see `table`), so a file whose unlocked
route comes before a locked one it overlaps does not route as it reads:
the operator is told. Two locked routes that can both match and share no
backend refuse such a completion: the operator is told that too.

"Can match the same completion" is answered conservatively: routes overlap
unless a key both set proves they cannot (`tools` true against false,
globs no string can match both). Content never proves it: the history is
scanned as a whole, so any two patterns can each find a message.
"""

from __future__ import annotations

from collections.abc import Sequence
from fnmatch import fnmatchcase

from spearpy.backends.routing.spec import MatchSpec, RouteSpec

_WILDCARDS = "*?["


def lock_warnings(routes: Sequence[RouteSpec]) -> tuple[str, ...]:
    """A sentence per pair of routes whose order or locks surprise."""
    found: list[str] = []
    for later, locked in enumerate(routes):
        if not locked.lock:
            continue
        for earlier, route in enumerate(routes[:later]):
            if not could_overlap(route.match, locked.match):
                continue
            if not route.lock:
                found.append(
                    f"{_label(earlier, route)} comes before locked {_label(later, locked)} "
                    "and can match the same completion: the locked route takes it (locks "
                    "are decided before order); list the locked route first to make the "
                    "file read as it routes")
            elif not set(route.to) & set(locked.to):
                found.append(
                    f"locked {_label(earlier, route)} and locked {_label(later, locked)} can "
                    "match the same completion and share no backend: such a completion is "
                    "refused (route_unavailable)")
    return tuple(found)


def could_overlap(a: MatchSpec, b: MatchSpec) -> bool:
    """Whether some completion might match both (False only when proven)."""
    if a.tools is not None and b.tools is not None and a.tools != b.tools:
        return False
    return _globs_meet(a.model, b.model) and _globs_meet(a.backend, b.backend)


def _globs_meet(a: Sequence[str], b: Sequence[str]) -> bool:
    # An empty list is an absent key: it matches any value.
    if not a or not b:
        return True
    return any(_glob_pair_meets(x, y) for x in a for y in b)


def _glob_pair_meets(x: str, y: str) -> bool:
    if not _has_wildcard(x):
        return fnmatchcase(x, y)
    if not _has_wildcard(y):
        return fnmatchcase(y, x)
    # Both have wildcards: every match of each starts with its literal head
    # and ends with its literal tail, so heads (tails) that disagree prove
    # no string matches both. Anything subtler is assumed to meet.
    head_x, head_y = _head(x), _head(y)
    tail_x, tail_y = _tail(x), _tail(y)
    return (head_x.startswith(head_y) or head_y.startswith(head_x)) and \
        (tail_x.endswith(tail_y) or tail_y.endswith(tail_x))


def _has_wildcard(glob: str) -> bool:
    return any(c in glob for c in _WILDCARDS)


def _head(glob: str) -> str:
    cut = min(i for i in (glob.find(c) for c in _WILDCARDS) if i >= 0)
    return glob[:cut]


def _tail(glob: str) -> str:
    # `]` closes a class: after the last wildcard or class end the text is literal.
    cut = max(glob.rfind(c) for c in "*?[]")
    return glob[cut + 1:]


def _label(index: int, route: RouteSpec) -> str:
    return f"route {route.name!r} (#{index + 1})"
