"""The HTTP API (docs/serve.md): runs, their live events, modules, metrics,
health, the OpenAPI document, and the page's static files."""

from __future__ import annotations

import asyncio
import math
import os
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING
from urllib.parse import urlencode

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.requests import Request
from starlette.responses import FileResponse, Response, StreamingResponse
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles

from spearpy.serve.fanout import follow, sse_message
from spearpy.serve.journal_route import journal_routes
from spearpy.serve.openapi import OPENAPI
from spearpy.serve.problems import Problem, run_row, unknown_run
from spearpy.serve.schema import (
    RESULT_FIELDS,
    RunRequest,
    check_limits,
    check_overrides,
    parse_body,
    run_view,
)
from spearpy.serve.starting import start_run
from spearpy.serve.store import MAX_SEQ, EventRow
from spearpy.serve.streams import stream_routes
from spearpy.serve.travel import travel_routes

if TYPE_CHECKING:
    from spearpy.serve.app import Service

STATIC = os.path.join(os.path.dirname(__file__), "static")


def _service(request: Request) -> Service:
    service: Service = request.app.state.service
    return service


async def create_run(request: Request) -> Response:
    service = _service(request)
    run = parse_body(await request.body(), RunRequest)  # JSON by then: web/guard.py JsonOnly
    check_overrides(run, service.config.allow_models, service.config.allow_backends)
    limits = check_limits(run.limits, service.hosts.base.config)
    return await start_run(service, run, limits)


async def list_runs(request: Request) -> Response:
    service = _service(request)
    query = request.query_params
    try:
        limit = min(max(int(query.get("limit", "50")), 1), 500)
        before = float(query["before"]) if "before" in query else None
        if before is not None and not math.isfinite(before):
            raise ValueError(before)
    except ValueError:
        raise Problem(400, "limit must be an integer and before a timestamp",
                      slug="bad-query") from None
    status = query.get("status")
    rows, more = await asyncio.to_thread(service.store.list_runs, limit, before, status)
    live = service.runs.live
    views = [run_view(row, full=False, cancel_requested=row["id"] in live and
                      live[row["id"]].cancel.is_set()) for row in rows]
    page = None
    if more:  # keeps the filter: without it, the next page listed every status
        cursor = {"limit": limit, "before": repr(rows[-1]["created_at"]), "status": status}
        page = "/v1/runs?" + urlencode({k: v for k, v in cursor.items() if v is not None})
    return service.json({"runs": views, "next": page})


async def get_run(request: Request) -> Response:
    service = _service(request)
    run_id = request.path_params["run_id"]
    row = await run_row(service.store, run_id)
    live = service.runs.live.get(run_id)
    return service.json(run_view(row, full=True,
                                 cancel_requested=live is not None and live.cancel.is_set()),
                        redacted=RESULT_FIELDS)


async def run_logs(request: Request) -> Response:
    """The guest's last log lines (SPEAR's API returns an execution's log
    lines): kept in a bounded ring, oldest first, once the run has ended."""
    service = _service(request)
    run_id = request.path_params["run_id"]
    # Its log lines alone, not its result (up to 64 MiB each of stdout and stderr).
    row = await asyncio.to_thread(service.store.get_logs, run_id)
    if row is None:
        raise unknown_run(run_id)
    logs = row.get("logs") or {}
    return service.json({"id": run_id, "status": row["status"],
                         "logs": logs.get("logs") or [],
                         "dropped": logs.get("dropped") or 0}, redacted=("logs",))


async def cancel_run(request: Request) -> Response:
    service = _service(request)
    run_id = request.path_params["run_id"]
    row = await run_row(service.store, run_id, output=False)  # the view shows no output
    if not service.runs.cancel(run_id, "request"):
        # It may have ended since the first read.
        row = await run_row(service.store, run_id, output=False)
        raise Problem(409, f"run {run_id} already ended ({row['outcome']})",
                      slug="run-ended", outcome=row["outcome"])
    return service.json(run_view(row, full=False, cancel_requested=True), 202)


async def run_events(request: Request) -> Response:
    service = _service(request)
    run_id = request.path_params["run_id"]
    await run_row(service.store, run_id, output=False)  # it exists
    last = request.headers.get("last-event-id") or request.query_params.get("last_event_id")
    try:
        cursor = int(last) if last not in (None, "") else -1
        if not -1 <= cursor < MAX_SEQ:  # SQLite's integers end at 2**63
            raise ValueError(last)
    except ValueError:
        raise Problem(400, f"Last-Event-ID must be an event seq, not {last!r}",
                      slug="bad-last-event-id") from None
    channel = service.hub.get(run_id)

    async def read_store(after: int, before: int | None) -> list[EventRow]:
        return await asyncio.to_thread(service.store.events, run_id, after, before)

    async def stream() -> AsyncIterator[bytes]:
        yield b"retry: 2000\n\n"
        async for row in follow(channel, read_store, cursor):
            yield b": keep-alive\n\n" if row is None else sse_message(row)

    return StreamingResponse(stream(), media_type="text/event-stream",
                             headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"})


async def list_modules(request: Request) -> Response:
    service = _service(request)
    names = await asyncio.to_thread(service.modules.names)
    described = [await asyncio.to_thread(service.modules.describe, n) for n in names]
    return service.json({"modules": described})


async def get_module(request: Request) -> Response:
    service = _service(request)
    name = request.path_params["name"]
    return service.json(await asyncio.to_thread(service.modules.describe, name))


async def metrics(request: Request) -> Response:
    registry = _service(request).registry
    return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)


async def healthz(request: Request) -> Response:
    return _service(request).json({"status": "ok"})


async def readyz(request: Request) -> Response:
    service = _service(request)
    if not service.ready:
        raise Problem(503, "not ready: starting or shutting down", slug="not-ready")
    runs = service.runs
    return service.json({"status": "ready", "active_runs": runs.active,
                         "max_concurrent": service.config.max_concurrent})


async def openapi(request: Request) -> Response:
    return _service(request).json(OPENAPI)


async def index(_request: Request) -> Response:
    return FileResponse(os.path.join(STATIC, "index.html"),
                        headers={"Cache-Control": "no-cache"})


def routes() -> list[BaseRoute]:
    return [
        Route("/", index, methods=["GET"]),
        Mount("/static", StaticFiles(directory=STATIC), name="static"),
        Route("/healthz", healthz, methods=["GET"]),
        Route("/readyz", readyz, methods=["GET"]),
        Route("/metrics", metrics, methods=["GET"]),
        Route("/v1/openapi.json", openapi, methods=["GET"]),
        Route("/v1/modules", list_modules, methods=["GET"]),
        Route("/v1/modules/{name}", get_module, methods=["GET"]),
        Route("/v1/runs", create_run, methods=["POST"]),
        Route("/v1/runs", list_runs, methods=["GET"]),
        Route("/v1/runs/{run_id}", get_run, methods=["GET"]),
        Route("/v1/runs/{run_id}", cancel_run, methods=["DELETE"]),
        Route("/v1/runs/{run_id}/events", run_events, methods=["GET"]),
        Route("/v1/runs/{run_id}/logs", run_logs, methods=["GET"]),
        *journal_routes(),
        *travel_routes(),
        *stream_routes(),
    ]
