"""Routing across backends: model aliases, routes, policies and health.

The pieces, each pure except the last two:
- `spec`: the `[models]`, `[[routes]]` and `[circuit_breaker]` tables,
  validated when the host starts;
- `matcher`: content regexes (with a literal prefilter) and globs;
- `table`: which route a completion takes and which backends it may use;
- `policy`: the order those backends are tried in;
- `health`: circuit breakers, requests in flight and latency per backend.

`spearpy.backends.router` puts them together as a backend made of backends,
so the tool loop still sees one backend per completion.
"""

from spearpy.backends.routing.spec import (
    POLICIES,
    AliasSpec,
    BreakerSpec,
    MatchSpec,
    RouteSpec,
    RoutingSpec,
)

__all__ = ["POLICIES", "AliasSpec", "BreakerSpec", "MatchSpec", "RouteSpec", "RoutingSpec"]
