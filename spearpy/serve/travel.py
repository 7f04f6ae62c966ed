"""`POST /v1/runs/{id}/replay` and `POST /v1/runs/{id}/fork`: a journaled run
again, as a new run of its own (docs/serve.md, "Replay and fork").

A replay re-executes the run offline, answered by its journal: nothing is
sent upstream, and it stops where the journal does (or before step
`until`). A fork is answered by the journal up to step `at`, copied into
the new run's own journal, and goes on live from there, with another model
or backend if asked (the operator's allow-lists apply as for a new run).
Both start with the run's module, arguments, env values and stdin: the
values are those the run store keeps with a journaled run's record
(store_resume), never the service's own environment.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from spearpy.durable import JournalSpec
from spearpy.journal import JournalError
from spearpy.serve.problems import Problem, run_row
from spearpy.serve.runs import JOURNAL_SYNC
from spearpy.serve.schema import (
    ForkRequest,
    ReplayRequest,
    RunRequest,
    check_limits,
    check_overrides,
    parse_body,
)
from spearpy.serve.starting import start_run
from spearpy.serve.store_resume import ResumeInputs

if TYPE_CHECKING:
    from spearpy.journal import Start
    from spearpy.serve.app import Service


@dataclass(frozen=True, slots=True)
class Origin:
    """The journaled run a new run replays (`fork` False) or forks."""

    run_id: str
    sha256: str | None  # its module's
    fork: bool
    step: int | None  # a replay stops before it; a fork goes live after it

    def journal(self, store: str, new_id: str) -> JournalSpec:
        """The new run's journal: the old one read, and for a fork its own written."""
        if self.fork:
            return JournalSpec(store, journal_id=self.run_id, mode="fork", until=self.step,
                               fork_into=JournalSpec(store, journal_id=new_id,
                                                     sync=JOURNAL_SYNC))
        return JournalSpec(store, journal_id=self.run_id, mode="replay", until=self.step)

    def record(self) -> dict[str, Any]:
        """What the new run's record says of where it came from."""
        return {"run": self.run_id, "mode": "fork" if self.fork else "replay",
                "step": self.step}

    def check_module(self, sha256: str) -> None:
        """The module file must still be the run's: another is not its journal's run."""
        if self.sha256 is not None and sha256 != self.sha256:
            raise Problem(409, f"module of run {self.run_id} has changed since it ran (sha256 "
                               f"{sha256[:12]}, the run's {self.sha256[:12]}): its journal "
                               "cannot answer another module", slug="module-changed")


async def replay_run(request: Request) -> Response:
    service: Service = request.app.state.service
    run_id = request.path_params["run_id"]
    body = parse_body(await request.body(), ReplayRequest)  # JSON: web/guard.py JsonOnly
    old, inputs, last = await _journaled(service, run_id)
    if body.until is not None and body.until > last + 1:
        raise _out_of_range("until", body.until, 1, last + 1, run_id)
    # Its own model and backend: nothing goes upstream, so no allow-list applies.
    run = _rerun(old, inputs, old.get("model"), old.get("backend"), None, body.wait)
    limits = check_limits(run.limits, service.hosts.base.config)
    return await start_run(service, run, limits, _origin(old, run_id, False, body.until))


async def fork_run(request: Request) -> Response:
    service: Service = request.app.state.service
    run_id = request.path_params["run_id"]
    body = parse_body(await request.body(), ForkRequest)
    old, inputs, last = await _journaled(service, run_id)
    if body.at > last:
        raise _out_of_range("at", body.at, 0, last, run_id)
    run = _rerun(old, inputs, body.model or old.get("model"), body.backend or old.get("backend"),
                 body.limits, body.wait)
    check_overrides(run, service.config.allow_models, service.config.allow_backends)
    limits = check_limits(run.limits, service.hosts.base.config)
    return await start_run(service, run, limits, _origin(old, run_id, True, body.at))


async def _journaled(service: Service, run_id: str
                     ) -> tuple[dict[str, Any], ResumeInputs, int]:
    """The run's record (its request, with module and sha256), its inputs and
    the last step of its journal that answers something (not the end)."""
    row = await run_row(service.store, run_id, output=False)
    if not (row.get("request") or {}).get("journal"):
        raise Problem(409, f"run {run_id} has no journal to replay", slug="no-journal")
    try:
        start, last = await asyncio.to_thread(service.journal_pages.outline, run_id)
    except JournalError as exc:
        raise Problem(409, f"run {run_id}'s journal cannot be read: {exc}",
                      slug="no-journal") from None
    inputs = await asyncio.to_thread(service.store.resume_inputs, run_id) or _from_start(start)
    if inputs is None:
        raise Problem(409, f"run {run_id}'s env values or stdin were not kept (it ended "
                           "before the service kept them for replays), and its journal "
                           "holds only their names or digest", slug="inputs-not-kept")
    return {**row["request"], "module": row["module"], "sha256": row.get("sha256")}, \
        inputs, last


def _from_start(start: Start) -> ResumeInputs | None:
    """A run's inputs from its journal alone: when it had no env and its
    stdin is in the journal whole."""
    if start.env_names or (start.stdin is None and start.stdin_length):
        return None
    return ResumeInputs({}, start.stdin.decode("utf-8", "replace") if start.stdin else None)


def _rerun(old: dict[str, Any], inputs: ResumeInputs, model: str | None, backend: str | None,
           limits: dict[str, int | float] | None, wait: bool) -> RunRequest:
    return RunRequest(module=old["module"], args=list(old.get("args", [])), env=inputs.env,
                      stdin=inputs.stdin, model=model, backend=backend, wait=wait,
                      limits=old.get("limits", {}) if limits is None else limits)


def _origin(old: dict[str, Any], run_id: str, fork: bool, step: int | None) -> Origin:
    return Origin(run_id, old.get("sha256"), fork, step)


def _out_of_range(field: str, value: int, low: int, high: int, run_id: str) -> Problem:
    return Problem(422, f"{field} {value} is out of range: run {run_id}'s journal has steps "
                        f"{low}..{high} for it", slug="step-out-of-range", field=field,
                   minimum=low, maximum=high)


def travel_routes() -> list[BaseRoute]:
    return [Route("/v1/runs/{run_id}/replay", replay_run, methods=["POST"]),
            Route("/v1/runs/{run_id}/fork", fork_run, methods=["POST"])]
