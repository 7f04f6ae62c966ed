"""User streams on `spearpy serve`, as SPEAR serves them (docs/streams.md):

    POST /api/v1/executions/{run_id}/streams/session   -> a token for that run (60 s)
    GET  /api/v1/executions/{run_id}/streams/ws        WebSocket, subprotocol spear.stream.v1,
                                                       token as ?token= (or Authorization: Bearer
                                                       on a service without a token)

`run_id` is the service's run id (`/v1/runs/{id}`). Unlike SPEAR, both the
token and the subprotocol are enforced: an upgrade without them is refused
with a problem body. The upgrade also follows the rule of every route
(web/guard.py): the service's own token when it has one (as Authorization,
or ?access_token= from a browser), loopback Host and Origin when not; and
the session route, like every POST, takes application/json only. Every run
gets a StreamHub when it starts; the service drives it only through
`Host.run(streams=...)`, as an embedder would.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any, cast

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route, WebSocketRoute
from starlette.websockets import WebSocket

from spearpy.serve.problems import Problem, run_row
from spearpy.serve.runs import LiveRun, RunManager
from spearpy.serve.streams_auth import StreamTokens, Verdict
from spearpy.serve.streams_ws import SUBPROTOCOL, serve_session
from spearpy.streams import StreamHub, StreamLimits, StreamsUnavailable
from spearpy.web.guard import refuse
from spearpy.web.problems import problem_response

if TYPE_CHECKING:
    from spearpy.host import Host
    from spearpy.outcome import RunResult
    from spearpy.serve.app import Service
    from spearpy.serve.executors import Executor

PREFIX = "/api/v1/executions/{run_id}/streams"


class ServeStreams:
    """The hubs of the service's live runs, and the tokens that reach them."""

    def __init__(self, limits: StreamLimits | None = None,
                 tokens: StreamTokens | None = None) -> None:
        self.limits = limits or StreamLimits()
        self.tokens = tokens or StreamTokens()
        self.hubs: dict[str, StreamHub] = {}  # service run id -> hub, while the run lives
        # Runs resumed after a restart that have not started again yet: their
        # hub comes when they do (a client asking meanwhile is told to retry).
        self.resuming: set[str] = set()


class _StreamingHost:
    """The run's Host with its hub passed to `run`: RunManager calls
    `host.run(...)` and reads `host.config`, nothing else."""

    def __init__(self, host: Host, hub: StreamHub) -> None:
        self._host = host
        self._hub = hub
        self.config = host.config

    def run(self, *args: Any, **kwargs: Any) -> RunResult:
        try:
            return self._host.run(*args, streams=self._hub, **kwargs)
        finally:
            self._hub.unbind()  # also when the run never started: clients see the end


class StreamingRunManager(RunManager):
    """RunManager whose runs each get a StreamHub, registered under the
    service's run id for as long as the run lives."""

    def __init__(self, streams: ServeStreams, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.streams = streams

    def adopt(self, live: LiveRun) -> None:
        super().adopt(live)
        self.streams.resuming.add(live.id)
        live.done.add_done_callback(lambda _done: self.streams.resuming.discard(live.id))

    def _host_for(self, live: LiveRun, host: Host, target: Executor) -> Host:
        self.streams.resuming.discard(live.id)
        if not target.streams:
            return host
        hub = StreamHub(self.streams.limits)
        self.streams.hubs[live.id] = hub

        def ended(_done: asyncio.Future[None]) -> None:
            self.streams.hubs.pop(live.id, None)
            self.streams.tokens.revoke_run(live.id)

        live.done.add_done_callback(ended)
        return cast("Host", _StreamingHost(host, hub))


def _service(scope_owner: Request | WebSocket) -> Service:
    service: Service = scope_owner.app.state.service
    return service


async def create_session(request: Request) -> Response:
    service = _service(request)
    run_id = request.path_params["run_id"]
    streams: ServeStreams = service.streams
    if run_id not in streams.hubs:
        # Whether the run exists: its record without its result (up to 64 MiB
        # each of stdout and stderr).
        await run_row(service.store, run_id, output=False)
    if run_id not in streams.hubs:  # again: a resumed run may have started during the read
        if run_id in streams.resuming:
            raise Problem(503, f"run {run_id} is resuming after a restart: its streams open "
                               "when it runs again; retry", slug="run-resuming",
                          headers={"Retry-After": "1"})
        if run_id in service.runs.live:
            raise Problem(409, f"run {run_id} has no user streams: it runs outside the "
                               "service's process; streams need the threads executor "
                               "(--executor threads, or auto for a module that imports "
                               "user_stream_*)", slug="streams-unavailable")
        raise Problem(409, f"run {run_id} has ended: its streams are closed", slug="run-ended")
    token = streams.tokens.issue(run_id)
    scheme = request.headers.get("x-forwarded-proto", request.url.scheme)
    ws_scheme = "wss" if scheme.lower() in ("https", "wss") else "ws"
    host = request.headers.get("host", f"{request.url.hostname}:{request.url.port}")
    ws_path = PREFIX.format(run_id=run_id) + "/ws"
    # Not through service.json: the Redactor would scrub the token this route exists to give.
    return JSONResponse({"execution_id": run_id, "token": token,
                         "ws_url": f"{ws_scheme}://{host}{ws_path}?token={token}",
                         "expires_in_ms": int(streams.tokens.ttl_s * 1000),
                         "subprotocol": SUBPROTOCOL},
                        headers={"Cache-Control": "no-store"})


async def stream_ws(websocket: WebSocket) -> None:
    service = _service(websocket)
    run_id = websocket.path_params["run_id"]
    streams: ServeStreams = service.streams
    token = _token(websocket)
    if token is None:
        return await _deny(websocket, 401, "this WebSocket needs a stream session token "
                           f"(POST {PREFIX.format(run_id=run_id)}/session) as ?token= or "
                           "Authorization: Bearer", "unauthorized")
    verdict = streams.tokens.check(token, run_id)
    if verdict is Verdict.INVALID:
        return await _deny(websocket, 401, "the stream token is unknown or expired",
                           "unauthorized")
    if verdict is Verdict.OTHER_RUN:
        return await _deny(websocket, 403, f"the stream token is not for run {run_id}",
                           "forbidden")
    if SUBPROTOCOL not in websocket.scope.get("subprotocols", []):
        return await _deny(websocket, 400, f"ask for the WebSocket subprotocol {SUBPROTOCOL}",
                           "bad-subprotocol")
    hub = streams.hubs.get(run_id)
    if hub is None or hub.ended:
        return await _deny(websocket, 409, f"run {run_id} has ended", "run-ended")
    try:
        session = hub.connect("ws")
    except StreamsUnavailable as exc:
        return await _deny(websocket, 409, str(exc), "stream-busy")
    try:
        await websocket.accept(subprotocol=SUBPROTOCOL)
    except BaseException:
        session.close("the upgrade failed", error=True)
        raise
    await serve_session(websocket, session)


def _token(websocket: WebSocket) -> str | None:
    # The query first: on a service with a token, Authorization carries that.
    if websocket.query_params.get("token"):
        return websocket.query_params["token"]
    auth = websocket.headers.get("authorization", "")
    scheme, _, credentials = auth.partition(" ")
    if scheme.lower() == "bearer" and credentials.strip():
        return credentials.strip()
    return None


async def _deny(websocket: WebSocket, status: int, detail: str, slug: str) -> None:
    response = problem_response(_service(websocket).redactor, status, detail, slug)
    await refuse(response, websocket.scope, websocket.receive, websocket.send)


def stream_routes() -> list[BaseRoute]:
    _hide_tokens_in_websocket_log()
    return [Route(PREFIX + "/session", create_session, methods=["POST"]),
            WebSocketRoute(PREFIX + "/ws", stream_ws)]


def _hide_tokens_in_websocket_log() -> None:
    # uvicorn logs every WebSocket upgrade with its query (our ?token=) on
    # uvicorn.error, which the access-log filter of serve/server.py does not see.
    from spearpy.serve.server import _TokenFilter

    logger = logging.getLogger("uvicorn.error")
    if not any(isinstance(f, _TokenFilter) for f in logger.filters):
        logger.addFilter(_TokenFilter())
