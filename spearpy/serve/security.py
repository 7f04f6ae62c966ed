"""What the service adds to the rule every HTTP surface follows
(web/guard.py): the paths open without its token, and the request body cap,
as plain ASGI middleware so it runs before any route."""

from __future__ import annotations

import re

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from spearpy.observe.redact import Redactor
from spearpy.serve.problems import Problem
from spearpy.web.problems import problem_response

# Needs no token: liveness probes, and the page's static code, which a browser
# loads by navigation (no header can be set) and which holds no data: all data
# comes from /v1, which needs the token. Full matches (web/guard.py TokenAuth).
OPEN_PATHS = re.compile(r"/(healthz|static/[A-Za-z0-9._-]+|favicon\.ico)?")
# EventSource cannot set headers, so the event stream also takes the token as
# ?access_token= (as every WebSocket upgrade does).
QUERY_TOKEN_PATHS = re.compile(r"/v1/runs/[^/]+/events")


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
