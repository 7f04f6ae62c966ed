"""Starting a checked run request: a slot, its module, the run handed to the
executor, and the API's answer. Shared by `POST /v1/runs` and the replay and
fork routes (serve/travel.py), whose runs are started the same way."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from starlette.responses import Response

from spearpy.errors import ModuleLoadError
from spearpy.serve.problems import Problem
from spearpy.serve.runs import RunNotRecorded
from spearpy.serve.schema import RESULT_FIELDS, run_view

if TYPE_CHECKING:
    from spearpy.serve.app import Service
    from spearpy.serve.modules import Loaded
    from spearpy.serve.schema import RunRequest
    from spearpy.serve.travel import Origin


async def start_run(service: Service, run: RunRequest, limits: dict[str, Any],
                    origin: Origin | None = None) -> Response:
    """Start `run` (its overrides and limits checked already); `origin`:
    it replays or forks that run's journal. 201 with the run's view."""
    runs = service.runs
    runs.take_slot()
    try:
        # One hop off the loop for all three (each hop is a thread hand-off),
        # none while the module's last load is fresh.
        host, module, wasm = await service.recent_modules.load(
            run, lambda: _load(service, run))
        if origin is not None:
            origin.check_module(module.sha256)
        live = await runs.start(run, host, module, limits, wasm, origin)
    except ModuleLoadError as exc:
        runs.give_slot()
        raise Problem(422, f"module {run.module!r} cannot be loaded: {exc}",
                      slug="module-load-error") from None
    except RunNotRecorded:
        raise  # started: its end gives the slot back
    except BaseException:
        runs.give_slot()
        raise
    if run.wait:
        # Shielded: a client that hangs up stops waiting, not the run.
        await asyncio.shield(live.done)
        if live.inserted is not None:
            live.inserted.result()  # done before the end was: raises if the record failed
    row = live.row  # what the store has committed by now (done: the finished record)
    view = run_view(row, full=run.wait, cancel_requested=live.cancel.is_set())
    return service.json(view, 201, {"Location": view["urls"]["self"]}, redacted=RESULT_FIELDS)


def _load(service: Service, run: RunRequest) -> Loaded:
    name, wasm = service.modules.read(run.module, 422)
    host = service.hosts.get(run.model, run.backend)
    return host, host.load(wasm, name), wasm
