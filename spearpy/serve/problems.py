"""Every error as an RFC 9457 problem body (web/problems.py).

Handlers turn anything a request can raise into one, including exceptions
nobody expected, so a bad request never crashes the service or answers with
an HTML page or a traceback.
"""

from __future__ import annotations

import asyncio
import logging
import traceback
from http import HTTPStatus
from typing import TYPE_CHECKING, Any

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from spearpy.errors import SpearpyError
from spearpy.observe.redact import Redactor
from spearpy.web.problems import problem_response

if TYPE_CHECKING:
    from spearpy.serve.store import RunStore

_log = logging.getLogger("spearpy.serve")


class Problem(SpearpyError):
    """Raised by any handler to answer with a problem body. `slug` names the
    kind of problem (`urn:spearpy:problem:<slug>`); extra members go in `extra`."""

    def __init__(self, status: int, detail: str, *, slug: str | None = None,
                 headers: dict[str, str] | None = None, **extra: Any) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail
        self.slug = slug
        self.headers = headers or {}
        self.extra = extra


def unknown_run(run_id: str) -> Problem:
    return Problem(404, f"no run {run_id!r}", slug="unknown-run")


async def run_row(store: RunStore, run_id: str, *, output: bool = True) -> dict[str, Any]:
    """The run's record, read off the event loop, or the 404; `output`
    False: without its output (up to 64 MiB each of stdout and stderr), for
    a route that shows none."""
    row = await asyncio.to_thread(store.get_run, run_id, output=output)
    if row is None:
        raise unknown_run(run_id)
    return row


def exception_handlers(redactor: Redactor) -> dict[Any, Any]:
    async def on_problem(_request: Request, exc: Exception) -> Response:
        assert isinstance(exc, Problem)
        return problem_response(redactor, exc.status, exc.detail, exc.slug, exc.headers,
                                **exc.extra)

    async def on_http(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        detail = exc.detail if exc.detail != HTTPStatus(exc.status_code).phrase else (
            f"{request.method} {request.url.path}: {HTTPStatus(exc.status_code).phrase.lower()}")
        return problem_response(redactor, exc.status_code, str(detail),
                                headers=dict(exc.headers or {}))

    return {Problem: on_problem, HTTPException: on_http}


class ResponseFailed(SpearpyError, RuntimeError):
    """What reaches the server when a response failed after it began: the
    original, which may quote a secret, is in the service log, scrubbed."""


class CatchAll:
    """The outermost handler of what nobody expected. Starlette's own re-raises
    the exception after its 500, and uvicorn then logs the traceback
    unscrubbed (an exception message may quote a key) and drops the
    connection, sometimes before the 500 reached the client (a reset). Here
    the traceback is logged scrubbed, the 500 answered on a connection that
    stays usable, and only a response that had already begun is ended by an
    exception the server may log."""

    def __init__(self, app: ASGIApp, redactor: Redactor) -> None:
        self._app = app
        self._redactor = redactor

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self._app(scope, receive, send)
            return
        started = False

        async def tracked(message: Message) -> None:
            nonlocal started
            started = started or message["type"] in ("http.response.start", "websocket.accept",
                                                      "websocket.close")
            await send(message)

        try:
            await self._app(scope, receive, tracked)
        except Exception as exc:
            trace = "".join(traceback.format_exception(exc))
            _log.error("unhandled error in %s %s\n%s", scope.get("method", "WEBSOCKET"),
                       scope.get("path", ""), self._redactor.text(trace))
            if started or scope["type"] == "websocket":
                raise ResponseFailed("the response failed; the service log has details"
                                     ) from None
            response = problem_response(self._redactor, 500,
                                        "internal error; the service log has details",
                                        "internal")
            await response(scope, receive, send)
