"""Who may call a spearpy HTTP surface, one rule for all of them
(`spearpy serve`, `spearpy mcp serve --http`), as ASGI middleware so it runs
before any route, for routes that do not exist, and for WebSocket upgrades:

- With a token, every request but the surface's open paths carries it as
  `Authorization: Bearer`, compared in constant time. A WebSocket upgrade,
  and the paths a surface names (an EventSource stream), may carry it as
  `?access_token=` instead (RFC 6750 section 2.3): a browser cannot set a
  header on either.
- Without a token the surface listens on loopback only (`check_bind`) and
  answers only loopback names: a page elsewhere reaches 127.0.0.1 too, by
  DNS rebinding (its Host is then its own name) or directly (its Origin is
  then its own site, which a WebSocket upgrade carries with no preflight).
- A request that may change state (POST, PUT, PATCH) is `application/json`:
  a page on another site cannot send one without a CORS preflight, which
  no surface grants, so no cross-site form or beacon reaches a route.
"""

from __future__ import annotations

import hmac
import os
import re
from collections.abc import Sequence
from urllib.parse import parse_qs, urlsplit

from starlette.responses import Response
from starlette.routing import BaseRoute, Match
from starlette.types import ASGIApp, Receive, Scope, Send

from spearpy.loopback import is_loopback
from spearpy.observe.redact import Redactor
from spearpy.web.problems import problem_response

# Below the Redactor's shortest secret a token would not be scrubbed from
# what a surface answers, and it would be guessable.
MIN_TOKEN_LEN = 16
_BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})


def token_from_env(given: str | None, env: str) -> str | None:
    """The `--token` flag's value, else the environment variable `env`'s."""
    return given if given else (os.environ.get(env) or None)


def check_token(token: str | None) -> None:
    if token is not None and len(token) < MIN_TOKEN_LEN:
        raise ValueError(f"the token must be at least {MIN_TOKEN_LEN} characters")


def check_bind(host: str, token: str | None, hint: str = "--token") -> None:
    """Refuse to listen beyond this machine without a token: the surfaces
    run code and spend the operator's model budget. `hint`: where a token
    comes from."""
    if token is None and not is_loopback(host):
        raise ValueError(f"refusing to listen on {host} without a token: give {hint}, "
                         f"or bind 127.0.0.1")


async def refuse(response: Response, scope: Scope, receive: Receive, send: Send) -> None:
    """Answer `response` instead of the route; to a WebSocket upgrade too,
    where the server can send an HTTP answer to one (else a bare close)."""
    if scope["type"] == "websocket" and "websocket.http.response" not in scope.get(
            "extensions", {}):
        await send({"type": "websocket.close", "code": 1008, "reason": ""})
        return
    await response(scope, receive, send)


def _header(scope: Scope, wanted: bytes) -> str | None:
    for name, value in scope.get("headers", []):
        if name == wanted:
            return bytes(value).decode("latin-1")
    return None


class TokenAuth:
    """The bearer token on every request but `open_paths` (a full match)."""

    def __init__(self, app: ASGIApp, token: str | None, redactor: Redactor,
                 open_paths: re.Pattern[str] | None = None,
                 query_paths: re.Pattern[str] | None = None) -> None:
        self.app = app
        self._token = token.encode() if token else None
        self._redactor = redactor
        self._open = open_paths
        self._query = query_paths

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (self._token is None or scope["type"] not in ("http", "websocket")
                or (self._open is not None and self._open.fullmatch(scope["path"]))):
            await self.app(scope, receive, send)
            return
        given = _bearer(scope)
        if given is None and (scope["type"] == "websocket" or (
                self._query is not None and self._query.fullmatch(scope["path"]))):
            values = parse_qs(scope.get("query_string", b"").decode("latin-1"))
            given = values["access_token"][0] if "access_token" in values else None
        # compare_digest: the time taken must not say how much of a guess was right.
        if given is None or not hmac.compare_digest(given.encode(), self._token):
            detail = ("this service needs `Authorization: Bearer <token>`" if given is None
                      else "the bearer token is not valid")
            await refuse(problem_response(self._redactor, 401, detail, "unauthorized",
                                          {"WWW-Authenticate": 'Bearer realm="spearpy"'}),
                         scope, receive, send)
            return
        await self.app(scope, receive, send)


def _bearer(scope: Scope) -> str | None:
    scheme, _, credentials = (_header(scope, b"authorization") or "").partition(" ")
    if scheme.lower() == "bearer" and credentials.strip():
        return credentials.strip()
    return None


class LoopbackOnly:
    """Without a token: refuse a Host that is not a loopback name (with or
    without a port: 421), and an Origin that is not a loopback site (403)."""

    def __init__(self, app: ASGIApp, redactor: Redactor) -> None:
        self.app = app
        self._redactor = redactor

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in ("http", "websocket"):
            host = _header(scope, b"host") or ""
            origin = _header(scope, b"origin")
            refusal = None
            if not _loopback_host(host):
                refusal = (421, f"this service answers only to loopback names without a "
                                f"token, not Host {host!r}", "misdirected-request")
            elif origin is not None and not _loopback_origin(origin):
                refusal = (403, f"this service answers only to pages on this machine "
                                f"without a token, not Origin {origin!r}", "cross-origin")
            if refusal is not None:
                await refuse(problem_response(self._redactor, *refusal), scope, receive, send)
                return
        await self.app(scope, receive, send)


def _loopback_host(value: str) -> bool:
    """Whether a Host header (`127.0.0.2:8700`, `[::1]`, `localhost`) names loopback."""
    if value.startswith("["):
        name, bracket, port = value[1:].partition("]")
        if not bracket or (port and not (port[0] == ":" and port[1:].isdigit())):
            return False
    else:
        name, colon, port = value.partition(":")
        if colon and not port.isdigit():
            return False  # another colon, or a port that is not one
    return is_loopback(name)


def _loopback_origin(value: str) -> bool:
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018  (raises on a port that is not a number)
    except ValueError:
        return False
    return parts.scheme in ("http", "https") and is_loopback(parts.hostname or "")


class JsonOnly:
    """A request with a body that may change state must say it is JSON (415).
    Only for a method and path one of `routes` serves, so a request no route
    takes still gets its 404 or 405."""

    def __init__(self, app: ASGIApp, redactor: Redactor, routes: Sequence[BaseRoute]) -> None:
        self.app = app
        self._redactor = redactor
        self._routes = routes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] in _BODY_METHODS:
            media = (_header(scope, b"content-type") or "").split(";")[0].strip().lower()
            if media != "application/json" and any(
                    route.matches(scope)[0] is Match.FULL for route in self._routes):
                detail = (f"{scope['method']} takes Content-Type: application/json only"
                          f" (an empty body or {{}} where nothing is sent), not "
                          f"{media or 'none'}")
                await refuse(problem_response(self._redactor, 415, detail,
                                              "unsupported-media-type"), scope, receive, send)
                return
        await self.app(scope, receive, send)
