"""A restarted service resumes the runs a crash interrupted (docs/serve.md,
"Resuming runs").

At start-up the store (store_resume.recover) marks `resumed` each run the
dead service left in progress whose journal has not ended and whose inputs
were kept; the rest become `interrupted` as before. Each resumed run is
adopted before the service answers its first request: its channel is open,
so a client reconnecting with Last-Event-ID follows it on, and DELETE and
the shutdown reach it. Then, as slots free up, it runs again from its
journal, which answers everything the run was told before the crash: no
completion or tool call it journaled is asked again, and its events go on
from the last one stored (serve/seqs.py). A fork (serve/travel.py) resumes
its own journal too, first given the forked run's steps up to its fork
point that it had not copied yet (executors/resumes.py), so those are not
asked live; a fork that wrote nothing yet is forked again.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from spearpy.durable import JournalSpec
from spearpy.executors.base import RunJob
from spearpy.executors.resumes import continued_fork
from spearpy.outcome import Outcome, RunResult
from spearpy.serve.runs import JOURNALS, LiveRun, RunManager
from spearpy.serve.seqs import MAX_KINDS, EventSeqs
from spearpy.serve.store_resume import Resumable, ResumeInputs

if TYPE_CHECKING:
    from spearpy.executors.hosts import HostPool
    from spearpy.serve.modules import ModuleDir
    from spearpy.serve.store import RunStore

_log = logging.getLogger("spearpy.serve")
_SLOT_POLL_S = 0.1  # how often a resumed run waiting for a slot looks again


def open_journals(state_dir: Path) -> Resumable:
    """Which runs can resume: those whose journal is in the state directory
    and has not ended (a run that ended before its end reached the run
    store has nothing left to do)."""

    def resumable(run_ids: list[str]) -> Iterable[str]:
        from spearpy.journal import SQLiteJournalStore

        path = state_dir / JOURNALS
        if not path.exists():
            return []
        store = SQLiteJournalStore(path)
        try:
            # Each by its id: the store holds every journaled run's journal.
            infos = [store.info(run_id) for run_id in run_ids]
        finally:
            store.close()
        return [info.id for info in infos if info is not None and not info.ended]

    return resumable


@dataclass
class _Waiting:
    live: LiveRun
    inputs: ResumeInputs


class Resumer:
    def __init__(self, runs: RunManager, store: RunStore, modules: ModuleDir,
                 hosts: HostPool) -> None:
        self._runs = runs
        self._store = store
        self._modules = modules
        self._hosts = hosts
        self._waiting: list[_Waiting] = []

    def adopt(self, run_ids: list[str], loop: asyncio.AbstractEventLoop) -> None:
        """Register the runs to resume, on the loop, before requests come."""
        for run_id in run_ids:
            row = self._store.get_run(run_id)
            inputs = self._store.resume_inputs(run_id)
            spec = self._runs.journal_spec(run_id)
            if row is None or inputs is None or spec is None:
                continue  # recover() resumes only runs with both, and only when journaling
            history = self._store.event_history(run_id, MAX_KINDS)
            live = LiveRun(run_id, loop.create_future(), row=row, journal=spec,
                           seqs=EventSeqs(history.kinds, history.next_seq),
                           stored=history.count, stored_bytes=history.size,
                           last_seq=history.next_seq - 1)
            self._runs.adopt(live)
            self._waiting.append(_Waiting(live, inputs))

    async def run(self) -> None:
        """Start each adopted run once a slot is free, oldest first."""
        waiting, self._waiting = self._waiting, []
        for item in waiting:
            live = item.live
            while not live.cancel.is_set() and not self._runs.try_slot():
                await asyncio.sleep(_SLOT_POLL_S)
            if live.cancel.is_set():
                # DELETE, or the service shutting down, before it ran again.
                self._runs.record_end(live, RunResult.ended_as(Outcome.CANCELLED, ""), None)
                continue
            try:
                await self._launch(live, item.inputs)
            except Exception as exc:
                _log.error("serve: run %s could not be resumed: %s", live.id, exc)
                self._runs.record_end(live, None, exc)
                self._runs.give_slot()

    async def _launch(self, live: LiveRun, inputs: ResumeInputs) -> None:
        row: dict[str, Any] = live.row
        request = row["request"]
        model, backend = request.get("model"), request.get("backend")
        name, wasm = await asyncio.to_thread(self._modules.read, row["module"], 404)
        host = self._hosts.get(model, backend)
        module = await asyncio.to_thread(host.load, wasm, name)
        # A changed module is not this run: the journal's start says so
        # (replay_mismatch, naming step 0) rather than this guessing.
        self._runs.mark_resumed(live, "restart", message="the service restarted; the run "
                                "goes on from its journal")
        journal = await asyncio.to_thread(self._journal_of, live, request.get("origin"))
        job = RunJob(live.id, module.name, module.sha256, list(request.get("args", [])),
                     inputs.env, inputs.stdin, dict(request.get("limits", {})), model, backend,
                     journal=journal)
        self._runs.submit(live, self._runs.executor.place(module), job, wasm, host, module)

    def _journal_of(self, live: LiveRun, origin: dict[str, Any] | None) -> JournalSpec | None:
        """The journal the run goes on with: its own; for a fork, its own
        made whole up to the fork point, or the fork again."""
        own = live.journal
        if own is None or not origin or origin.get("mode") != "fork":
            return own
        forked = JournalSpec(self._runs.journal_store, journal_id=str(origin["run"]),
                             mode="fork", until=origin.get("step"), fork_into=own)
        return continued_fork(forked) or forked
