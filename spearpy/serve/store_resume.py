"""What the run store keeps so that a restarted service can resume a run
from its journal (docs/serve.md, "Resuming runs"), and the start-up pass
that decides, for each run a dead service left in progress, whether it
resumes or ends `interrupted`.

A resume needs the run's request whole: the journal keeps the names of its
environment variables, never their values, and its stdin only when small.
So a journaled run's env values and stdin are kept in `resume_inputs` as
long as its record: a resume needs them, and so does a replay or fork of
the run once it has ended (serve/travel.py).
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from spearpy.executors.base import RUN_RESUMED
from spearpy.serve.store_rows import IN_PROGRESS

INTERRUPTED = "the service stopped while the run was in progress (crash or kill)"
# Which of these runs can resume (their journal is there and has not ended).
Resumable = Callable[[list[str]], Iterable[str]]
# Service events (not the guest's): left out when a resumed run's events
# are matched against those stored before.
_SERVICE_KINDS = (RUN_RESUMED,)
# The service's event that says its bounds dropped a run's events (serve/runs.py).
EVENTS_DROPPED = "events_dropped"


@dataclass(frozen=True)
class ResumeInputs:
    env: dict[str, str]
    stdin: str | None


@dataclass
class EventHistory:
    """A run's stored events, as its resume continues them: the guest's
    event kinds in order (up to the first gap a dropped event left), how
    many there are and their bytes, and the next free seq."""

    kinds: list[str] = field(default_factory=list)
    count: int = 0
    size: int = 0
    next_seq: int = 0


def recover(db: sqlite3.Connection, resumable: Resumable | None
            ) -> tuple[list[str], list[str]]:
    """Runs left in progress by a service that died: those `resumable`
    accepts (with their inputs kept) become `resumed`; the others are
    marked interrupted (their inputs kept: a journal cut short can still
    be replayed or forked) and their event stream ended, so no client waits
    for them forever. Returns (interrupted, resumed)."""
    now = time.time()
    marks = ",".join("?" * len(IN_PROGRESS))
    ids = [row[0] for row in db.execute(f"SELECT id FROM runs WHERE status IN ({marks})",
                                        IN_PROGRESS)]
    # Only the runs in progress: every ended journaled run keeps its inputs too.
    kept = {row[0] for row in db.execute(
        f"SELECT run_id FROM resume_inputs WHERE run_id IN (SELECT id FROM runs "
        f"WHERE status IN ({marks}))", IN_PROGRESS)}
    candidates = [run_id for run_id in ids if run_id in kept]
    resumed = set(resumable(candidates)) & set(candidates) if resumable and candidates \
        else set()
    db.execute("BEGIN IMMEDIATE")
    interrupted = []
    for run_id in ids:
        if run_id in resumed:
            db.execute("UPDATE runs SET status='resumed' WHERE id=?", (run_id,))
            continue
        interrupted.append(run_id)
        (last,) = db.execute("SELECT MAX(seq) FROM events WHERE run_id=?",
                             (run_id,)).fetchone()
        seq = -1 if last is None else int(last)
        record = {"kind": "run_end", "run_id": None, "seq": seq + 1, "ts": now, "fd": None,
                  "outcome": "interrupted", "exit_code": None, "elapsed_ms": None,
                  "service": True}
        db.execute("INSERT INTO events VALUES (?,?,?,?)",
                   (run_id, seq + 1, "run_end", json.dumps(record)))
        db.execute("UPDATE runs SET status='interrupted', outcome='interrupted', "
                   "ended_at=?, message=? WHERE id=?", (now, INTERRUPTED, run_id))
    db.execute("COMMIT")
    return interrupted, sorted(resumed)


def insert_inputs(db: sqlite3.Connection, run_id: str, inputs: ResumeInputs) -> None:
    db.execute("INSERT OR REPLACE INTO resume_inputs VALUES (?,?,?)",
               (run_id, json.dumps(inputs.env, ensure_ascii=False), inputs.stdin))


def read_inputs(db: sqlite3.Connection, run_id: str) -> ResumeInputs | None:
    row = db.execute("SELECT env, stdin FROM resume_inputs WHERE run_id=?",
                     (run_id,)).fetchone()
    if row is None:
        return None
    return ResumeInputs(json.loads(row[0]), row[1])


def event_history(db: sqlite3.Connection, run_id: str, max_kinds: int) -> EventHistory:
    history = EventHistory()
    gap = False
    found = db.execute("SELECT seq, kind, length(record) FROM events WHERE run_id=? "
                       "ORDER BY seq", (run_id,))
    try:
        for seq, kind, size in found:
            history.count += 1
            history.size += int(size)
            history.next_seq = int(seq) + 1
            gap = gap or kind == EVENTS_DROPPED or len(history.kinds) >= max_kinds
            if not gap and kind not in _SERVICE_KINDS:
                history.kinds.append(str(kind))
    finally:
        found.close()
    return history
