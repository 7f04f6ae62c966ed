"""Runs off the event loop, on the service's executor (serve/executors.py:
threads of one shared Host by default, worker processes, or Ray).

At most --max-concurrent runs at once. A run's events come back from
wherever it executes to the store, and once committed to the event loop
(`call_soon_threadsafe`), where the run's channel hands them to subscribers.
A journaled run that resumes (serve/resume.py, or on another worker) keeps
one sequence of event ids (serve/seqs.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import secrets
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from spearpy.context import RUN_LIMITS
from spearpy.durable import JournalSpec
from spearpy.executors.base import RUN_RESUMED, RunJob
from spearpy.executors.hosts import HostPool
from spearpy.executors.journals import shared_spec
from spearpy.host import Host, LoadedModule
from spearpy.journal import SyncPolicy
from spearpy.observe.events import RUN_END, Event, FanOut
from spearpy.outcome import RunResult
from spearpy.serve.config import ServeConfig
from spearpy.serve.events import EventEncoder
from spearpy.serve.executors import Executor, ThreadRuns
from spearpy.serve.fanout import Channel, Hub
from spearpy.serve.handoff import LoopHandoff
from spearpy.serve.problems import Problem
from spearpy.serve.schema import RunRequest
from spearpy.serve.seqs import EventSeqs
from spearpy.serve.store import EventRow, RunStore
from spearpy.serve.store_resume import EVENTS_DROPPED, ResumeInputs

if TYPE_CHECKING:
    from spearpy.serve.travel import Origin

_log = logging.getLogger("spearpy.serve")
# What the store keeps of one run's events: a guest churning objects (streams
# opened and closed, sessions) makes events without end, each a row on disk.
# Past either bound the rest are dropped and counted; an `events_dropped`
# event says so where the dropping starts and, with the count, before the
# run's end, which is always stored.
MAX_STORED_EVENTS = 100_000
MAX_STORED_EVENT_BYTES = 64 << 20
JOURNALS = "journals.sqlite3"  # in --state-dir: every journaled run's journal, by run id

# The service's journals are written through to the OS at each record, not
# fsynced: a run survives the service process dying (the crash a service
# resumes from), not a power cut, which would lose at most the last steps of
# the runs in flight (their calls made again on resume). Each fsync queued
# the 64-concurrent-run bench behind the shared database (docs/serve.md).
JOURNAL_SYNC = SyncPolicy.NONE


class RunNotRecorded(Problem):
    """The run started but its record could not be stored: it was cancelled,
    and it gives its slot back when it ends (the caller must not)."""


@dataclass
class LiveRun:
    id: str
    done: asyncio.Future[None]  # resolved on the loop once the end is committed
    cancel: threading.Event = field(default_factory=threading.Event)
    cancel_reason: str | None = None  # "request" (DELETE) or "shutdown"
    last_seq: int = -1
    final: EventRow | None = None  # the run_end event, held back to commit with the record
    # The record as stored (request and result as objects), finished once the
    # run ends: a waiting POST answers from it without reading the store back.
    row: dict[str, Any] = field(default_factory=dict)
    inserted: Future[None] | None = None  # the record's commit, when nobody awaited it
    stored: int = 0  # events stored, and their bytes (MAX_STORED_EVENTS, ..._BYTES)
    stored_bytes: int = 0
    dropped: int = 0  # events past those bounds, not stored
    last_dropped: int = -1  # the seq of the last of them
    journal: JournalSpec | None = None  # where the run is journaled; None: it is not
    seqs: EventSeqs = field(default_factory=EventSeqs)  # event seqs -> ids, across resumes


class RunManager:
    def __init__(self, config: ServeConfig, hosts: HostPool, store: RunStore, hub: Hub,
                 encoder: EventEncoder, metrics_sink: Any,
                 loop: asyncio.AbstractEventLoop, on_reject: Callable[[], None],
                 executor: Executor | None = None,
                 on_start: Callable[[str], None] | None = None) -> None:
        self._config = config
        self._hosts = hosts
        self._store = store
        self._hub = hub
        self._encoder = encoder
        self._metrics = metrics_sink
        self._loop = loop
        self._on_reject = on_reject
        self._handoff = LoopHandoff(loop)
        self.executor: Executor = executor or ThreadRuns(config.max_concurrent)
        self._on_start = on_start  # with the executor's name, once a run is handed to it
        self._slots = threading.BoundedSemaphore(config.max_concurrent)
        # Every journal the service keeps; replays and forks read it with journaling off too.
        self.journal_store = f"sqlite:{config.state_path / JOURNALS}"
        self._journals = self.journal_store if config.journal else None
        self.live: dict[str, LiveRun] = {}
        self.draining = False
        self._drain: asyncio.Task[None] | None = None

    @property
    def active(self) -> int:
        return len(self.live)

    def take_slot(self) -> None:
        if self.draining:
            raise Problem(503, "the service is shutting down", slug="shutting-down",
                          headers={"Retry-After": str(self._config.retry_after_s)})
        if not self._slots.acquire(blocking=False):
            self._on_reject()
            raise Problem(429, f"{self._config.max_concurrent} runs are in progress, the "
                               "most this service runs at once; retry later",
                          slug="too-many-runs",
                          headers={"Retry-After": str(self._config.retry_after_s)},
                          max_concurrent=self._config.max_concurrent)

    def try_slot(self) -> bool:
        """A slot if one is free (for a resumed run, which waits its turn)."""
        return not self.draining and self._slots.acquire(blocking=False)

    def give_slot(self) -> None:
        self._slots.release()

    def journal_spec(self, run_id: str) -> JournalSpec | None:
        """Where the run is journaled: with journaling on, every run (one with
        user streams or a microphone too: a resumed one gets a hub again, and
        a client that reconnects reaches it, docs/durable.md)."""
        if self._journals is None:
            return None
        # One store for all the runs in a process (executors/journals.py).
        return shared_spec(self._journals, run_id, JOURNAL_SYNC)

    async def start(self, request: RunRequest, host: Host, module: LoadedModule,
                    limits: dict[str, Any], wasm: bytes, origin: Origin | None = None
                    ) -> LiveRun:
        """Record the run and hand it to a worker; the caller holds a slot.
        `origin`: the run replays or forks another's journal (serve/travel.py)."""
        run_id = secrets.token_hex(8)
        target = self.executor.place(module)
        journal = self.journal_spec(run_id) if origin is None else \
            origin.journal(self.journal_store, run_id)
        # Its own journal, by its id: not a replay's, which only reads another's.
        own_journal = journal is not None and (origin is None or origin.fork)
        live = LiveRun(run_id, self._loop.create_future(), journal=journal)
        # The channel first: a subscriber who sees the record must find it.
        self._hub.open(run_id)
        self.live[run_id] = live
        row = {"id": run_id, "created_at": time.time(), "status": "running",
               "module": module.name, "sha256": module.sha256,
               "request": {"args": request.args, "env": sorted(request.env),
                           "stdin_bytes": len((request.stdin or "").encode()),
                           "limits": limits, "limits_effective": _effective(host, limits),
                           "loop_limits": {"max_iterations": host.config.max_iterations,
                                           "max_tool_calls": host.config.max_tool_calls},
                           "model": request.model, "backend": request.backend,
                           "executor": target.name, "journal": own_journal,
                           **({"origin": origin.record()} if origin else {})}}
        live.row = row
        # The run starts while its record is committed: the writer commits in
        # order, so the record still lands before any of the run's events. A
        # journaled run's env values and stdin are kept with its record: a
        # resume, replay or fork needs them, and the record and the journal
        # hold neither.
        inputs = ResumeInputs(dict(request.env), request.stdin) if own_journal else None
        inserted = self._store.insert_run(row, inputs)
        job = RunJob(run_id, module.name, module.sha256, list(request.args), dict(request.env),
                     request.stdin, dict(limits), request.model, request.backend,
                     journal=live.journal)
        try:
            self.submit(live, target, job, wasm, host, module)
        except BaseException as exc:
            # It never ran: its record ends now (host_error), or the list and
            # page would show it running until a restart. The caller gives
            # the slot back. Its 500 waits for the record, as an id does: a
            # client that lists runs next finds it (its end shows from memory
            # until that commits too).
            self._record_end(live, None, exc)
            with contextlib.suppress(Exception):
                await asyncio.wrap_future(inserted)
            raise
        # Answered only once the record is on disk: a client that got the id
        # must find the run. A failed insert fails the request; the run
        # then ends on its own, its events and end unrecorded. A waiting
        # request checks it after the end instead (committed in order, the
        # insert is done by then): one hop less through the loop.
        if not request.wait:
            try:
                await asyncio.wrap_future(inserted)
            except Exception as exc:
                # Nobody will hold its id: the run must not go on unseen. It
                # gives its slot back when it ends, as every started run does.
                self.cancel(run_id, "request")
                raise RunNotRecorded(503, f"the run could not be recorded ({exc}); it was "
                                          "cancelled", slug="store-failed") from exc
        else:
            live.inserted = inserted
        return live

    def submit(self, live: LiveRun, target: Executor, job: RunJob, wasm: bytes, host: Host,
               module: LoadedModule) -> None:
        """Hand a recorded run to `target`; its end gives its slot back."""
        host = self._host_for(live, host, target)
        on_event = FanOut(lambda event: self._observe(live, event))
        target.submit(job, wasm, host, module, live.cancel, on_event,
                      lambda result, error: self._end(live, result, error))
        if self._on_start is not None:
            self._on_start(target.name)

    def adopt(self, live: LiveRun) -> None:
        """A run resumed after a restart, before it is submitted: clients
        find its channel, DELETE and the shutdown reach it (serve/resume.py)."""
        self._hub.open(live.id)
        self.live[live.id] = live

    def _host_for(self, live: LiveRun, host: Host, target: Executor) -> Host:
        """The Host a run on `target` is given (StreamingRunManager adds its
        hub); what it sets up ends with `live.done`."""
        return host

    def cancel(self, run_id: str, reason: str) -> bool:
        live = self.live.get(run_id)
        if live is None:
            return False
        if live.cancel_reason is None:
            live.cancel_reason = reason
        live.cancel.set()
        self.executor.cancel(run_id)
        return True

    # ---- on the executor's threads -----------------------------------------

    def _end(self, live: LiveRun, result: RunResult | None, error: BaseException | None
             ) -> None:
        try:
            self._record_end(live, result, error)
        finally:
            self.give_slot()

    def record_end(self, live: LiveRun, result: RunResult | None,
                   error: BaseException | None) -> None:
        """End a run that holds no slot (a resumed run that never started)."""
        self._record_end(live, result, error)

    def _record_end(self, live: LiveRun, result: RunResult | None,
                    error: BaseException | None) -> None:
        fields, final = self._final(live, result, error)
        live.row = {**live.row, **fields}
        if live.dropped > 1:  # the first one's seq holds the marker already
            self._store_row(live, _dropped_row(live, "run_end"))
        self._store.finish_run(live.id, fields, final, after=lambda: self._to_loop(
            self._ended, live, final))

    def _observe(self, live: LiveRun, event: Event) -> None:
        if self._on_event(live, event):
            self._metrics(event)  # a replayed repeat was counted the first time

    def _on_event(self, live: LiveRun, event: Event) -> bool:
        """Store and publish one of the run's events; False when it is not
        the run's own new event (a resume's marker, or one replayed again)."""
        if event.kind == RUN_RESUMED:  # its worker died: it starts again elsewhere
            self.mark_resumed(live, "worker_lost", **event.data)
            return False
        event_id = live.seqs.id_of(event.seq, event.kind)
        if event_id is None:
            return False
        if event_id != event.seq:
            event = dataclasses.replace(event, seq=event_id)
        self._keep(live, self._encoder.row(event))
        return True

    def mark_resumed(self, live: LiveRun, why: str, **data: Any) -> None:
        """The `run_resumed` event: the run goes on from its journal."""
        seq = live.seqs.new_attempt() if why == "worker_lost" else live.seqs.marker()
        record = {"kind": RUN_RESUMED, "run_id": None, "seq": seq, "ts": time.time(),
                  "fd": None, "why": why, **data, "service": True}
        self._keep(live, (seq, RUN_RESUMED, json.dumps(record, separators=(",", ":"))))

    def _keep(self, live: LiveRun, row: EventRow) -> None:
        live.last_seq = row[0]
        if row[1] == RUN_END:
            live.final = row  # committed with the finished record, see _execute
            return
        if live.dropped or live.stored >= MAX_STORED_EVENTS or \
                live.stored_bytes + len(row[2]) > MAX_STORED_EVENT_BYTES:
            live.dropped += 1
            live.last_dropped = row[0]
            if live.dropped > 1:
                return
            row = _dropped_row(live, "limit")
        live.stored += 1
        live.stored_bytes += len(row[2])
        self._store_row(live, row)

    def _store_row(self, live: LiveRun, row: EventRow) -> None:
        channel = self._hub.get(live.id)
        self._store.append_event(live.id, row, lambda: self._committed(live.id, channel, row))

    def _committed(self, run_id: str, channel: Channel | None, row: EventRow) -> None:
        """On the store's writer thread, once `row` is committed: to the
        run's subscribers, if anyone follows it (fanout.Channel.followed;
        else a subscriber reads it from the store)."""
        if channel is not None and not channel.followed:
            return
        self._to_loop(self._hub.publish, run_id, [row])

    def _to_loop(self, fn: Any, *args: Any) -> None:
        self._handoff.post(fn, *args)

    def _final(self, live: LiveRun, result: RunResult | None,
               error: BaseException | None) -> tuple[dict[str, Any], EventRow]:
        if result is None:
            result = RunResult.ended_as("host_error", f"{type(error).__name__}: {str(error)[:500]}")
        message = result.message
        if result.outcome == "cancelled" and live.cancel_reason == "shutdown":
            message = (f"the service shut down and the run did not end within its "
                       f"{self._config.grace:g} s grace")
        elif result.outcome == "cancelled" and live.cancel_reason == "request":
            message = "cancelled by DELETE /v1/runs/" + live.id
        final = live.final or self._encoder.synthetic_end(
            live.last_seq + 1, result.outcome, result.exit_code)
        output = {"usage": result.usage, "elapsed_ms": round(result.elapsed_ms, 3),
                  "stdout": (result.stdout or b"").decode("utf-8", "replace"),
                  "stderr": (result.stderr or b"").decode("utf-8", "replace"),
                  "transcripts": result.transcripts,
                  # The guest's last log lines (a bounded ring: spearpy.logring).
                  "logs": result.logs, "logs_dropped": result.logs_dropped}
        fields = {"status": "finished", "ended_at": time.time(), "outcome": result.outcome,
                  "exit_code": result.exit_code, "message": self._encoder.redact(message),
                  "host_run_id": result.run_id or None, "cancel_reason": live.cancel_reason,
                  "result": self._encoder.redact(output)}
        return fields, final

    # ---- back on the loop ----------------------------------------------------

    def _ended(self, live: LiveRun, final: EventRow) -> None:
        self._hub.publish(live.id, [final], ended=True)
        self.live.pop(live.id, None)
        if not live.done.done():
            live.done.set_result(None)

    def drain(self) -> asyncio.Task[None]:
        """Start shutting down once (on the loop); later calls return the same task.
        Started by the signal, not only by the lifespan: uvicorn waits for open
        connections (event streams, waiting POSTs) before the lifespan's turn,
        and those end only when their runs do."""
        if self._drain is None:
            self.draining = True
            self._drain = self._loop.create_task(self._shutdown(self._config.grace))
        return self._drain

    async def _shutdown(self, grace: float) -> None:
        """Stop taking runs, give those in progress `grace` seconds, cancel the
        rest (their outcome is `cancelled`, their message says why) and wait
        for them to end."""
        waiting = [live.done for live in self.live.values()]
        if waiting:
            await asyncio.wait(waiting, timeout=grace)
        left = list(self.live.values())
        for live in left:
            self.cancel(live.id, "shutdown")
        if left:
            # Guest code stops within an epoch tick; a request already on the
            # wire ends when the host closes its clients (Host.close).
            await asyncio.wait([live.done for live in left], timeout=5.0)

    def close(self) -> None:
        self.executor.close()


def _dropped_row(live: LiveRun, at: str) -> EventRow:
    """The `events_dropped` event, in the seq of the last event dropped: where
    the dropping starts (`at` "limit") or, with the count, at the run's end."""
    record = {"kind": EVENTS_DROPPED, "run_id": None, "seq": live.last_dropped,
              "ts": time.time(), "fd": None, "at": at, "dropped": live.dropped,
              "stored": live.stored, "stored_bytes": live.stored_bytes,
              "max_events": MAX_STORED_EVENTS, "max_bytes": MAX_STORED_EVENT_BYTES,
              "service": True}
    return live.last_dropped, EVENTS_DROPPED, json.dumps(record, separators=(",", ":"))


def _effective(host: Host, limits: dict[str, Any]) -> dict[str, Any]:
    """The limits the run gets: its own, else the service's (unset ones left out)."""
    merged = {name: limits.get(name, getattr(host.config, name)) for name in sorted(RUN_LIMITS)}
    return {name: value for name, value in merged.items() if value is not None}

