"""The OpenAPI 3.1 document of the API, served at /v1/openapi.json.

Written by hand: the API is small, and a hand-written document says what
each field means rather than what a type checker inferred."""

from __future__ import annotations

from typing import Any

_PROBLEM = {"description": "an RFC 9457 problem", "content": {
    "application/problem+json": {"schema": {"$ref": "#/components/schemas/Problem"}}}}
_RUN = {"content": {"application/json": {"schema": {"$ref": "#/components/schemas/Run"}}}}
_ID = {"name": "run_id", "in": "path", "required": True, "schema": {"type": "string"}}
_ERRORS = {"401": _PROBLEM, "404": _PROBLEM}


def _op(summary: str, responses: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"summary": summary, "responses": responses, **extra}


def _body(schema: str) -> dict[str, Any]:
    return {"required": True, "content": {"application/json": {
        "schema": {"$ref": f"#/components/schemas/{schema}"}}}}


OPENAPI: dict[str, Any] = {
    "openapi": "3.1.0",
    "info": {"title": "spearpy serve", "version": "1",
             "description": "Run SPEAR-ABI WebAssembly agents as a service and watch their "
                            "tool loop live. See docs/serve.md."},
    "components": {
        "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        "schemas": {
            "Problem": {"type": "object", "required": ["type", "title", "status", "detail"],
                        "properties": {"type": {"type": "string"}, "title": {"type": "string"},
                                       "status": {"type": "integer"},
                                       "detail": {"type": "string"}}},
            "RunRequest": {
                "type": "object", "required": ["module"], "additionalProperties": False,
                "properties": {
                    "module": {"type": "string", "description": "a file name from GET /v1/modules"},
                    "args": {"type": "array", "items": {"type": "string"}, "maxItems": 1024},
                    "env": {"type": "object", "additionalProperties": {"type": "string"}},
                    "stdin": {"type": "string"},
                    "limits": {"type": "object", "description": "timeout, tool_timeout, fuel, "
                               "max_memory, max_open_fds, max_log_bytes, max_host_bytes, "
                               "max_parallel_tools; at most the service's own",
                               "additionalProperties": {"type": "number"}},
                    "model": {"type": "string", "description": "only one from --allow-model"},
                    "backend": {"type": "string",
                                "description": "only one from --allow-backend"},
                    "wait": {"type": "boolean", "description": "answer when the run ends"}}},
            "ReplayRequest": {
                "type": "object", "additionalProperties": False,
                "properties": {
                    "until": {"type": "integer", "minimum": 1,
                              "description": "stop before this step (cancelled)"},
                    "wait": {"type": "boolean"}}},
            "ForkRequest": {
                "type": "object", "required": ["at"], "additionalProperties": False,
                "properties": {
                    "at": {"type": "integer", "minimum": 0,
                           "description": "steps 1..at come from the journal, then live"},
                    "model": {"type": "string", "description": "only one from --allow-model"},
                    "backend": {"type": "string",
                                "description": "only one from --allow-backend"},
                    "limits": {"type": "object", "additionalProperties": {"type": "number"}},
                    "wait": {"type": "boolean"}}},
            "Run": {
                "type": "object",
                "properties": {
                    "id": {"type": "string"}, "module": {"type": "string"},
                    "status": {"enum": ["running", "resumed", "finished", "interrupted"]},
                    "outcome": {"type": ["string", "null"],
                                "description": "exited, cancelled, timeout, trap, ..., or "
                                               "interrupted (the service died)"},
                    "exit_code": {"type": ["integer", "null"]},
                    "message": {"type": "string"}, "cancel_requested": {"type": "boolean"},
                    "created_at": {"type": "number"}, "ended_at": {"type": ["number", "null"]},
                    "elapsed_ms": {"type": ["number", "null"]},
                    "executor": {"type": ["string", "null"],
                                 "description": "where it ran: threads, processes or ray "
                                                "(null for runs recorded before this field)"},
                    "usage": {"type": ["object", "null"]},
                    "stdout": {"type": "string"}, "stderr": {"type": "string"},
                    "transcripts": {"type": "array", "items": {"type": "object"}},
                    "origin": {"type": ["object", "null"],
                               "description": "a replay's or fork's {run, mode, step}"},
                    "urls": {"type": "object"}}},
        },
    },
    "security": [{"bearer": []}],
    "paths": {
        "/v1/runs": {
            "post": _op("Start a run", {"201": _RUN, "413": _PROBLEM, "415": _PROBLEM,
                                        "422": _PROBLEM, "429": _PROBLEM, "503": _PROBLEM},
                        requestBody=_body("RunRequest")),
            "get": _op("List runs, newest first", {"200": {"description": "runs"}},
                       parameters=[{"name": n, "in": "query", "schema": {"type": t}}
                                   for n, t in (("limit", "integer"), ("before", "number"),
                                                ("status", "string"))]),
        },
        "/v1/runs/{run_id}": {
            "get": _op("A run: status, outcome, exit code, output, usage, transcripts",
                       {"200": _RUN, **_ERRORS}, parameters=[_ID]),
            "delete": _op("Cancel a run", {"202": _RUN, "409": _PROBLEM, **_ERRORS},
                          parameters=[_ID]),
        },
        "/v1/runs/{run_id}/events": {
            "get": _op("The run's events as Server-Sent Events: replayed from the start "
                       "(or after Last-Event-ID), then live, ending with run_end. Also "
                       "takes the token as ?access_token=",
                       {"200": {"description": "text/event-stream; `id` is the event seq",
                                "content": {"text/event-stream": {}}}, **_ERRORS},
                       parameters=[_ID, {"name": "Last-Event-ID", "in": "header",
                                         "schema": {"type": "integer"}}]),
        },
        "/v1/runs/{run_id}/logs": {
            "get": _op("The guest's last log lines (a bounded ring, oldest first; "
                       "`dropped` earlier ones were not kept), once the run has ended",
                       {"200": {"description": "log lines"}, **_ERRORS}, parameters=[_ID]),
        },
        "/v1/runs/{run_id}/journal": {
            "get": _op("A journaled run's steps (seq, kind, summary), a page at a time; "
                       "`next` is the next page's URL or null",
                       {"200": {"description": "steps"}, **_ERRORS},
                       parameters=[_ID, *({"name": n, "in": "query",
                                           "schema": {"type": "integer"}}
                                          for n in ("after", "limit"))]),
        },
        "/v1/runs/{run_id}/replay": {
            "post": _op("Replay a journaled run offline as a new run: its journal answers, "
                        "nothing goes upstream", {"201": _RUN, "409": _PROBLEM,
                                                  "422": _PROBLEM, "429": _PROBLEM, **_ERRORS},
                        parameters=[_ID], requestBody=_body("ReplayRequest")),
        },
        "/v1/runs/{run_id}/fork": {
            "post": _op("Fork a journaled run as a new run: answered by its journal up to "
                        "step `at`, then live (another model or backend if allowed)",
                        {"201": _RUN, "409": _PROBLEM, "422": _PROBLEM, "429": _PROBLEM,
                         **_ERRORS}, parameters=[_ID], requestBody=_body("ForkRequest")),
        },
        "/v1/modules": {"get": _op("The modules a run may name, as `spearpy inspect` "
                                   "describes them", {"200": {"description": "modules"}})},
        "/v1/modules/{name}": {"get": _op("One module", {"200": {"description": "module"},
                                                         **_ERRORS})},
        "/metrics": {"get": _op("Prometheus metrics", {"200": {"description": "text"}})},
        "/healthz": {"get": _op("Liveness (no token needed)", {"200": {"description": "ok"}},
                                security=[])},
        "/readyz": {"get": _op("Readiness", {"200": {"description": "ready"},
                                             "503": _PROBLEM})},
    },
}
