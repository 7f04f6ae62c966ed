"""What a request may ask for, checked before anything runs, and what the
API says about a run."""

from __future__ import annotations

import json
import math
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from spearpy.config import HostConfig
from spearpy.context import RUN_LIMITS
from spearpy.serve.problems import Problem

MAX_ARGS = 1024
# Largest limit value a request may give: SQLite's and wasmtime's integers end here.
MAX_LIMIT = 2**63 - 1


class RunRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    module: str = Field(min_length=1, max_length=133)
    args: list[str] = Field(default_factory=list, max_length=MAX_ARGS)
    # Values only: a None (`--env NAME`, pass a host variable through) would let
    # a caller read the service's own environment.
    env: dict[str, str] = Field(default_factory=dict)
    stdin: str | None = None
    limits: dict[str, int | float] = Field(default_factory=dict)
    model: str | None = None
    backend: str | None = None
    wait: bool = False

    @field_validator("args")
    @classmethod
    def _no_nul_in_args(cls, value: list[str]) -> list[str]:
        for arg in value:
            if "\0" in arg:
                raise ValueError("guest arguments cannot contain NUL")
        return value

    @field_validator("env")
    @classmethod
    def _env_names(cls, value: dict[str, str]) -> dict[str, str]:
        for name, item in value.items():
            if not name or "=" in name or "\0" in name or "\0" in item:
                raise ValueError(f"env names must be non-empty, without '=' or NUL, and "
                                 f"values without NUL: {name!r}")
        return value


class ReplayRequest(BaseModel):
    """`POST /v1/runs/{id}/replay`: stop before step `until` (else where the journal does)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    until: int | None = Field(default=None, ge=1, strict=True)
    wait: bool = False


class ForkRequest(BaseModel):
    """`POST /v1/runs/{id}/fork`: steps 1..`at` answered by the journal, then
    live with these (the forked run's own where not given)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    at: int = Field(ge=0, strict=True)
    model: str | None = None
    backend: str | None = None
    limits: dict[str, int | float] | None = None
    wait: bool = False


Body = TypeVar("Body", bound=BaseModel)


def parse_body(raw: bytes, model: type[Body]) -> Body:
    """A `model` request from a POST body: strict JSON (no
    NaN or Infinity, no number past a float's range, no lone surrogate,
    nesting within what the parser reads), then the request's own checks."""
    try:
        body = json.loads(raw, parse_constant=_no_constant, parse_float=_finite)
        # A \ud800 escape is valid JSON but not text: nothing after this
        # (SQLite, the guest's UTF-8 argv, the event log) can encode it.
        json.dumps(body, ensure_ascii=False).encode()
    except RecursionError:
        raise Problem(400, "the body is nested deeper than the service reads",
                      slug="invalid-json") from None
    except UnicodeEncodeError:
        raise Problem(400, "the body holds a lone UTF-16 surrogate escape, which is not "
                           "text", slug="invalid-json") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise Problem(400, f"the body is not JSON: {exc}", slug="invalid-json") from None
    return _validated(body, model)


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text[:40]} is past the range of a number")
    return value


def _validated(body: Any, model: type[Body]) -> Body:
    if not isinstance(body, dict):
        raise Problem(422, "the body must be a JSON object", slug="invalid-request")
    try:
        return model.model_validate(body)
    except ValidationError as exc:
        errors = [{"field": ".".join(str(p) for p in e["loc"]), "message": e["msg"]}
                  for e in exc.errors(include_url=False, include_input=False)]
        first = errors[0]
        raise Problem(422, f"{first['field']}: {first['message']}", slug="invalid-request",
                      errors=errors) from None


def check_limits(requested: dict[str, int | float], host: HostConfig) -> dict[str, Any]:
    """The run's limits: a request may only tighten the operator's (the
    service's own --timeout, --fuel, ... are the maxima)."""
    if not requested:
        # Nothing to check, and validating a HostConfig reads the environment
        # (pydantic-settings): most of a short run's request cost, measured.
        return {}
    unknown = sorted(set(requested) - RUN_LIMITS)
    if unknown:
        raise Problem(422, f"unknown limit {unknown[0]!r}; a run may set "
                           f"{', '.join(sorted(RUN_LIMITS))}", slug="unknown-limit",
                      limit=unknown[0])
    for name, value in requested.items():
        if isinstance(value, bool):
            raise Problem(422, f"limits.{name} must be a number", slug="invalid-request",
                          limit=name)
        if not -MAX_LIMIT <= value <= MAX_LIMIT:  # NaN fails this too
            # Past this nothing runs differently, and a 400-digit integer
            # does not even convert to a float to be compared or shown.
            raise Problem(422, f"limits.{name} is out of range (at most {MAX_LIMIT})",
                          slug="invalid-request", limit=name)
        maximum = getattr(host, name)
        if maximum is not None and value > maximum:
            raise Problem(422, f"limits.{name} = {value:g} is over the service's maximum "
                               f"{maximum:g}", slug="limit-exceeded", limit=name,
                          maximum=maximum, requested=value)
    try:
        HostConfig.model_validate({**host.model_dump(), **requested})
    except ValidationError as exc:
        error = exc.errors(include_url=False)[0]
        name = str(error["loc"][0]) if error["loc"] else "limits"
        raise Problem(422, f"limits.{name}: {error['msg']}", slug="invalid-request",
                      limit=name) from None
    return dict(requested)


def check_overrides(request: RunRequest, models: tuple[str, ...],
                    backends: tuple[str, ...]) -> None:
    for field, value, allowed, flag in (("model", request.model, models, "--allow-model"),
                                        ("backend", request.backend, backends,
                                         "--allow-backend")):
        if value is not None and value not in allowed:
            listed = ", ".join(allowed) if allowed else "none"
            raise Problem(422, f"{field} {value!r} is not one the operator allows "
                               f"({flag}: {listed})", slug="override-not-allowed",
                          field=field)


# The fields of a full view read from the stored result, which the service's
# Redactor cleaned before storing it (RunManager._final): Service.json passes
# them through instead of scanning them again.
RESULT_FIELDS = ("stdout", "stderr", "transcripts")


def run_view(row: dict[str, Any], *, full: bool, cancel_requested: bool = False
             ) -> dict[str, Any]:
    """A run as the API shows it: the request (env names only, stdin's size
    only) and, once it ended, its result; `full` adds output and transcripts."""
    request = row.get("request") or {}
    result = row.get("result") or {}
    run_id = row["id"]
    view: dict[str, Any] = {
        "id": run_id, "module": row["module"], "sha256": row.get("sha256"),
        "status": row["status"], "outcome": row.get("outcome"),
        "exit_code": row.get("exit_code"), "message": row.get("message") or "",
        "cancel_requested": cancel_requested or row.get("cancel_reason") is not None,
        "cancel_reason": row.get("cancel_reason"), "created_at": row["created_at"],
        "ended_at": row.get("ended_at"), "elapsed_ms": result.get("elapsed_ms"),
        "host_run_id": row.get("host_run_id"), "args": request.get("args", []),
        "env": request.get("env", []), "stdin_bytes": request.get("stdin_bytes", 0),
        "limits": request.get("limits", {}),
        "limits_effective": request.get("limits_effective", {}),
        "loop_limits": request.get("loop_limits", {}), "model": request.get("model"),
        "backend": request.get("backend"), "executor": request.get("executor"),
        "usage": result.get("usage"),
        # A replay or fork: {"run", "mode", "step"} of the journal it came from.
        "origin": request.get("origin"),
        "urls": {"self": f"/v1/runs/{run_id}", "events": f"/v1/runs/{run_id}/events",
                 "logs": f"/v1/runs/{run_id}/logs", "page": f"/#/runs/{run_id}"},
    }
    if request.get("journal"):
        view["urls"].update(journal=f"/v1/runs/{run_id}/journal",
                            replay=f"/v1/runs/{run_id}/replay", fork=f"/v1/runs/{run_id}/fork")
    if full:
        view.update(stdout=result.get("stdout"), stderr=result.get("stderr"),
                    transcripts=result.get("transcripts", []))
    return view
