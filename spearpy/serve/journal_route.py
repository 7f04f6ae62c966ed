"""`GET /v1/runs/{id}/journal`: a journaled run's steps, a page at a time
(docs/serve.md). Each step is shown as `spearpy show` prints it: seq, kind
and a one-line summary (none with --no-event-content, which keeps tool
arguments and results out of what the service shows)."""

from __future__ import annotations

import asyncio
import itertools
import threading
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from spearpy.journal import End, JournalError, JournalStore, SQLiteJournalStore, Start
from spearpy.journal.view import summary
from spearpy.serve.problems import Problem, run_row
from spearpy.serve.runs import JOURNALS

if TYPE_CHECKING:
    from spearpy.serve.app import Service

PAGE_STEPS = 512
_DEFAULT_STEPS = 100


class JournalPages:
    """The service's reader of its journal store, opened on first use."""

    def __init__(self, service: Service) -> None:
        self._path = service.config.state_path / JOURNALS
        self._redact = service.redactor.text
        self._lock = threading.Lock()
        self._store: JournalStore | None = None

    def page(self, run_id: str, after: int, limit: int, content: bool
             ) -> tuple[list[dict[str, Any]], bool]:
        """Up to `limit` steps after seq `after`, and whether more follow. The
        store reads from there (keyset), a page at a time: a journal's last
        page costs what its first does."""
        records = self._opened(run_id).records(run_id, after=max(after, -1))
        steps = [{"seq": r.seq, "kind": r.kind,
                  **({"summary": summary(r, self._redact)} if content else {})}
                 for r in itertools.islice(records, limit + 1)]
        return steps[:limit], len(steps) > limit

    def outline(self, run_id: str) -> tuple[Start, int]:
        """The journal's start, and its last step that answers something (a
        replay or fork can start from): the end record is none. Two records
        read, the first and the last (seqs follow one another, so the step
        before the end is the end's seq less one); the replay or fork reads
        and checks the rest."""
        store = self._opened(run_id)
        records = store.records(run_id)
        try:
            start = next(records, None)
        finally:
            records.close()
        if not isinstance(start, Start):
            raise JournalError(f"journal {run_id!r} is empty: no start record")
        last = store.last_record(run_id)
        if last is None or isinstance(last, Start):
            return start, 0
        return start, last.seq - 1 if isinstance(last, End) else last.seq

    def _opened(self, run_id: str) -> JournalStore:
        with self._lock:
            if self._store is None:
                if not self._path.exists():
                    raise JournalError(f"no journal {run_id!r}")
                self._store = SQLiteJournalStore(self._path)
            return self._store

    def close(self) -> None:
        with self._lock:
            if self._store is not None:
                self._store.close()
                self._store = None


async def run_journal(request: Request) -> Response:
    service: Service = request.app.state.service
    run_id = request.path_params["run_id"]
    row = await run_row(service.store, run_id, output=False)
    query = request.query_params
    try:
        after = int(query.get("after", "-1"))
        limit = min(max(int(query.get("limit", str(_DEFAULT_STEPS))), 1), PAGE_STEPS)
    except ValueError:
        raise Problem(400, "after and limit must be integers", slug="bad-query") from None
    if not (row.get("request") or {}).get("journal"):
        raise Problem(404, f"run {run_id} has no journal", slug="no-journal")
    try:
        steps, more = await asyncio.to_thread(service.journal_pages.page, run_id, after,
                                              limit, service.config.event_content)
    except JournalError as exc:
        raise Problem(404, f"run {run_id}'s journal cannot be read: {exc}",
                      slug="no-journal") from None
    page = f"/v1/runs/{run_id}/journal?after={steps[-1]['seq']}&limit={limit}" \
        if more else None
    # What a fork of the run may pick (POST /v1/runs/{id}/fork): the page offers them.
    allowed = {"models": list(service.config.allow_models),
               "backends": list(service.config.allow_backends)}
    return service.json({"steps": steps, "next": page, "fork": allowed})


def journal_routes() -> list[BaseRoute]:
    return [Route("/v1/runs/{run_id}/journal", run_journal, methods=["GET"])]
