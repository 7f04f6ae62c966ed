"""Who may call the service, and how much they may send: bearer-token
authentication and the request body cap, as plain ASGI middleware so they
run before any route (and for routes that do not exist)."""

from __future__ import annotations

import hmac
import re
from urllib.parse import parse_qs

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from spearpy.observe.redact import Redactor
from spearpy.serve.problems import Problem, problem_response

# Needs no token: liveness probes, and the page's static code, which a browser
# loads by navigation (no header can be set) and which holds no data: all data
# comes from /v1, which needs the token.
_OPEN = re.compile(r"^/(healthz|static/[A-Za-z0-9._-]+|favicon\.ico)?$")
# EventSource cannot set headers, so the event stream alone also takes the
# token as ?access_token= (RFC 6750 section 2.3).
_QUERY_TOKEN = re.compile(r"^/v1/runs/[^/]+/events$")


class TokenAuth:
    def __init__(self, app: ASGIApp, token: str | None, redactor: Redactor) -> None:
        self.app = app
        self._token = token.encode() if token else None
        self._redactor = redactor

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self._token is None or scope["type"] != "http" or _OPEN.match(scope["path"]):
            await self.app(scope, receive, send)
            return
        given = self._bearer(scope)
        if given is None and _QUERY_TOKEN.match(scope["path"]):
            values = parse_qs(scope.get("query_string", b"").decode("latin-1"))
            given = values["access_token"][0] if "access_token" in values else None
        # compare_digest: the time taken must not say how much of a guess was right.
        if given is None or not hmac.compare_digest(given.encode(), self._token):
            detail = ("this service needs `Authorization: Bearer <token>`" if given is None
                      else "the bearer token is not valid")
            response = problem_response(self._redactor, 401, detail, "unauthorized",
                                        {"WWW-Authenticate": 'Bearer realm="spearpy"'})
            await response(scope, receive, send)
            return
        await self.app(scope, receive, send)

    @staticmethod
    def _bearer(scope: Scope) -> str | None:
        for name, value in scope.get("headers", []):
            if name == b"authorization":
                scheme, _, credentials = bytes(value).decode("latin-1").partition(" ")
                if scheme.lower() == "bearer" and credentials.strip():
                    return credentials.strip()
        return None


class BodyTooLarge(Problem):
    def __init__(self, limit: int) -> None:
        super().__init__(413, f"the request body is larger than {limit} bytes",
                         slug="body-too-large", max_bytes=limit)


class BodyCap:
    """Refuses a declared Content-Length over the cap before reading a byte,
    and stops a chunked body as soon as it passes the cap."""

    def __init__(self, app: ASGIApp, max_bytes: int, redactor: Redactor) -> None:
        self.app = app
        self._max = max_bytes
        self._redactor = redactor

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        for name, value in scope.get("headers", []):
            if name == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    declared = -1
                if declared > self._max or declared < 0:
                    problem = BodyTooLarge(self._max) if declared > 0 else Problem(
                        400, "the Content-Length header is not a number", slug="bad-request")
                    response = problem_response(self._redactor, problem.status, problem.detail,
                                                problem.slug, **problem.extra)
                    await response(scope, receive, send)
                    return
        seen = 0

        async def capped() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self._max:
                    raise BodyTooLarge(self._max)  # the problem handler answers 413
            return message

        await self.app(scope, capped, send)


_LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "[::1]", "::1"})


class LoopbackHostOnly:
    """Without a token the service trusts whoever can reach loopback; a web
    page elsewhere can reach it too, by pointing its own DNS name at
    127.0.0.1 (DNS rebinding). Its requests carry that name as Host: refuse
    any Host that is not a loopback name."""

    def __init__(self, app: ASGIApp, redactor: Redactor) -> None:
        self.app = app
        self._redactor = redactor

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            host = ""
            for name, value in scope.get("headers", []):
                if name == b"host":
                    host = value.decode("latin-1").lower()
            name = host.rsplit(":", 1)[0] if not host.endswith("]") else host
            if name not in _LOOPBACK_NAMES:
                response = problem_response(
                    self._redactor, 421, f"this service answers only to loopback names "
                                         f"without a token, not Host {host!r}",
                    "misdirected-request")
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)
