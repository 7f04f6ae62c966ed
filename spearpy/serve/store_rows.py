"""The rows of the run store: the tables, how a run's record maps to its
columns and back, and a run's end while it is not on the disk."""

from __future__ import annotations

import json
import sqlite3
from typing import Any

_SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    id TEXT PRIMARY KEY, created_at REAL NOT NULL, ended_at REAL, status TEXT NOT NULL,
    module TEXT NOT NULL, sha256 TEXT, request TEXT NOT NULL, outcome TEXT,
    exit_code INTEGER, message TEXT, host_run_id TEXT, cancel_reason TEXT, result TEXT,
    summary TEXT, logs TEXT);
CREATE INDEX IF NOT EXISTS runs_by_created ON runs (created_at);
CREATE TABLE IF NOT EXISTS events (
    run_id TEXT NOT NULL, seq INTEGER NOT NULL, kind TEXT NOT NULL, record TEXT NOT NULL,
    PRIMARY KEY (run_id, seq)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS resume_inputs (
    run_id TEXT PRIMARY KEY, env TEXT NOT NULL, stdin TEXT) WITHOUT ROWID;
"""
# A run's status while it goes on: as started, or resumed from its journal
# after the service restarted.
IN_PROGRESS = ("running", "resumed")
COLUMNS = ("id", "created_at", "ended_at", "status", "module", "sha256", "request", "outcome",
           "exit_code", "message", "host_run_id", "cancel_reason", "result", "summary", "logs")
_JSON_COLUMNS = ("request", "result", "summary", "logs")
# What the run list shows of a result, kept in a column of its own: the
# result holds the output (up to 64 MiB each of stdout and stderr, and the
# transcripts), which a list of 500 runs must not read.
_SUMMARY_KEYS = ("usage", "elapsed_ms")
# The guest's last log lines ({"logs": [...], "dropped": n}), in a column of
# their own too: what GET /v1/runs/{id}/logs reads instead of the result. A
# bounded ring (spearpy.logring), but up to 256 KiB: not in a listing either.
_LOG_KEYS = {"logs": "logs", "logs_dropped": "dropped"}  # result key: column key
# What a run's end holds in memory only while its disk refuses it, up to a cap.
OUTPUT_COLUMNS = ("result", "logs")
LISTED = tuple(name for name in COLUMNS if name not in OUTPUT_COLUMNS)
LOGS = ("id", "status", "logs")

EventRow = tuple[int, str, str]  # seq, kind, JSON record


def create_tables(db: sqlite3.Connection) -> None:
    db.executescript(_SCHEMA)
    # A state directory from before the summary column: add it, and fill it
    # for the runs there once, here, rather than on every listing.
    summary = ", ".join(f"'{key}', json_extract(result, '$.{key}')" for key in _SUMMARY_KEYS)
    _add_column(db, "summary", f"json_object({summary})")
    # The logs column is added, not filled: filling rewrites every row, its
    # result with it (the directory's size again in the WAL, at start). A
    # run without it, ended by an older spearpy, has its lines read from its
    # result (`logs_of_result`), also when that one ended it after the column came.
    _add_column(db, "logs", None)


def _add_column(db: sqlite3.Connection, name: str, fill: str | None) -> None:
    if name in {row[1] for row in db.execute("PRAGMA table_info(runs)")}:
        return
    db.execute("BEGIN IMMEDIATE")
    db.execute(f"ALTER TABLE runs ADD COLUMN {name} TEXT")
    if fill is not None:
        db.execute(f"UPDATE runs SET {name} = {fill} WHERE result IS NOT NULL")
    db.execute("COMMIT")


_LOGS_OF_RESULT = (
    "SELECT json_object('logs', json(coalesce(json_extract(result, '$.logs'), '[]')), "
    "'dropped', coalesce(json_extract(result, '$.logs_dropped'), 0)) "
    "FROM runs WHERE id = ? AND result IS NOT NULL")


def logs_of_result(db: sqlite3.Connection, run_id: str) -> dict[str, Any] | None:
    """The log lines of a run an older spearpy ended (inside its result),
    taken out by SQLite: the result itself never comes here."""
    row = db.execute(_LOGS_OF_RESULT, (run_id,)).fetchone()
    return None if row is None else dict(json.loads(row[0]))


def end_columns(fields: dict[str, Any]) -> dict[str, Any]:
    """A run's end fields as stored: the summary of their result, and its
    log lines moved to their own column."""
    result = fields.get("result")
    if not isinstance(result, dict):
        return fields
    kept = {key: value for key, value in result.items() if key not in _LOG_KEYS}
    return {**fields, "result": kept,
            "summary": {key: result.get(key) for key in _SUMMARY_KEYS},
            "logs": {column: result.get(key) for key, column in _LOG_KEYS.items()}}


class UnstoredEnd:
    """A run's end on its way to the disk, or refused by it: what reads show
    in its place, so the live service never calls a finished run running."""

    def __init__(self, names: list[str], values: list[Any], final: EventRow | None) -> None:
        self.names = names
        self.values = values
        self.final = final
        self.refused = False
        self.output_bytes = sum(len(v) for n, v in zip(names, values, strict=True)
                                if n in OUTPUT_COLUMNS and isinstance(v, str))

    def drop_output(self) -> None:
        self.values = [None if n in OUTPUT_COLUMNS else v
                       for n, v in zip(self.names, self.values, strict=True)]
        self.output_bytes = 0

    def over(self, record: dict[str, Any]) -> dict[str, Any]:
        if record["status"] not in IN_PROGRESS:
            return record  # the end (or a recovery) is on disk after all
        ended = dict(record)
        for name, value in zip(self.names, self.values, strict=True):
            if name not in record:
                continue  # a column this read left out (a listing leaves out the output)
            ended[name] = json.loads(value) if name in _JSON_COLUMNS and value is not None \
                else value
        return ended


def column(row: dict[str, Any], name: str) -> Any:
    value = row.get(name)
    if name in _JSON_COLUMNS and value is not None:
        return json.dumps(value, ensure_ascii=False)
    return value


def record_of(names: tuple[str, ...], row: tuple[Any, ...]) -> dict[str, Any]:
    record = dict(zip(names, row, strict=True))
    for name in _JSON_COLUMNS:
        if record.get(name) is not None:
            record[name] = json.loads(record[name])
    return record
