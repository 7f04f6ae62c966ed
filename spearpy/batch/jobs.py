"""Batch inputs and results: one JSONL line in, one JSONL line out.

An input line is a JSON object:

    {"id": "q1", "argv": ["--fast", "x"], "stdin": "text", "env": {"K": "V"}}

every key optional (`stdin_b64` for binary stdin). `id` (a string or an
integer) names the input in the results file; without one the line number
does, which is only stable while the inputs file is not edited.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from spearpy import _json
from spearpy.errors import SpearpyError
from spearpy.executors.base import WORKER_LOST as WORKER_LOST  # the outcome, for batch callers
from spearpy.executors.base import RunJob
from spearpy.outcome import exit_code_for

if TYPE_CHECKING:
    from spearpy.durable import JournalSpec
    from spearpy.outcome import RunResult

_INPUT_KEYS = frozenset({"id", "argv", "stdin", "stdin_b64", "env"})


class BatchError(SpearpyError):
    """The batch cannot run (bad inputs or results file, ...)."""


class WorkerError(BatchError):
    """Batch workers cannot start or keep dying before they are ready."""


@dataclass(frozen=True, slots=True)
class RunSettings:
    """What every run of a batch gets besides its input: `spearpy batch`'s
    sandbox flags, resolved in the parent (so a worker elsewhere runs with
    the same environment), and whether the run's events travel back with
    its result."""

    env: dict[str, str] = field(default_factory=dict)  # under each input's own env
    dirs: tuple[tuple[str, str], ...] = ()
    invoke: str | None = None
    events: bool = False


# Where a result record carries its run's events to the parent; taken out
# before the record is written.
EVENTS_KEY = "_events"


@dataclass(frozen=True, slots=True)
class BatchInput:
    index: int  # position among the file's inputs, 0-based: the dispatch key
    line: int  # 1-based line number in the inputs file
    id: str | int
    argv: tuple[str, ...] = ()
    stdin: bytes | None = None
    env: dict[str, str] = field(default_factory=dict)

    @property
    def key(self) -> str:
        return id_key(self.id)


def id_key(value: object) -> str:
    """How ids are compared: by their JSON text, so "1" and 1 stay distinct."""
    return json.dumps(value, ensure_ascii=False)


def _bad(line: int, message: str) -> BatchError:
    return BatchError(f"inputs line {line}: {message}")


def parse_input(raw: str, line: int, index: int) -> BatchInput:
    try:
        value = _json.loads(raw)
    except json.JSONDecodeError as exc:
        raise _bad(line, f"not JSON ({exc.msg})") from exc
    if not isinstance(value, dict):
        raise _bad(line, "must be a JSON object like {\"id\": ..., \"argv\": [...]}")
    unknown = sorted(set(value) - _INPUT_KEYS)
    if unknown:
        raise _bad(line, f"unknown keys {unknown}; allowed: {sorted(_INPUT_KEYS)}")
    ident = value.get("id", f"line:{line}")
    if isinstance(ident, bool) or not isinstance(ident, str | int):
        raise _bad(line, "'id' must be a string or an integer")
    argv = value.get("argv", [])
    if not isinstance(argv, list) or not all(isinstance(a, str) for a in argv):
        raise _bad(line, "'argv' must be a list of strings")
    env = value.get("env", {})
    if not isinstance(env, dict) or not all(
            isinstance(k, str) and k and "=" not in k and isinstance(v, str)
            for k, v in env.items()):
        raise _bad(line, "'env' must map variable names (without '=') to strings")
    stdin: bytes | None = None
    if "stdin" in value and "stdin_b64" in value:
        raise _bad(line, "give 'stdin' or 'stdin_b64', not both")
    if isinstance(value.get("stdin"), str):
        stdin = value["stdin"].encode()
    elif value.get("stdin") is not None:
        raise _bad(line, "'stdin' must be a string")
    if value.get("stdin_b64") is not None:
        try:
            stdin = base64.b64decode(value["stdin_b64"], validate=True)
        except (TypeError, binascii.Error) as exc:
            raise _bad(line, "'stdin_b64' is not valid base64") from exc
    return BatchInput(index=index, line=line, id=ident, argv=tuple(argv), stdin=stdin,
                      env=dict(env))


def read_inputs(path: str | os.PathLike[str]) -> list[BatchInput]:
    """Every input of a JSONL file (blank lines skipped); ids must be unique."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise BatchError(f"cannot read inputs {path}: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise BatchError(f"inputs {path} is not UTF-8") from exc
    inputs: list[BatchInput] = []
    first_line: dict[str, int] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        item = parse_input(raw, number, len(inputs))
        if item.key in first_line:
            raise _bad(number, f"id {item.id!r} was already used on line {first_line[item.key]}"
                       " (ids must be unique: they are how a resumed batch knows what is done)")
        first_line[item.key] = number
        inputs.append(item)
    return inputs


def _text_fields(record: dict[str, Any], name: str, data: bytes | None) -> None:
    if data is None:
        record[name] = None
        return
    try:
        record[name] = data.decode("utf-8")
    except UnicodeDecodeError:
        record[name] = None
        record[f"{name}_b64"] = base64.b64encode(data).decode("ascii")


def result_record(job: BatchInput, result: RunResult, attempts: int,
                  transcripts: bool = False) -> dict[str, Any]:
    record: dict[str, Any] = {
        "id": job.id, "line": job.line, "outcome": result.outcome,
        "exit_code": result.exit_code, "message": result.message,
    }
    _text_fields(record, "stdout", result.stdout)
    _text_fields(record, "stderr", result.stderr)
    record["usage"] = dict(result.usage)
    record["elapsed_ms"] = round(result.elapsed_ms, 3)
    record["attempts"] = attempts
    if transcripts:
        record["transcripts"] = result.transcripts
    return record


def failure_record(job: BatchInput, outcome: str, message: str, attempts: int) -> dict[str, Any]:
    """A result for an input that produced no RunResult (host error, lost worker)."""
    return {"id": job.id, "line": job.line, "outcome": outcome,
            "exit_code": exit_code_for(outcome), "message": message, "stdout": None,
            "stderr": None, "usage": {}, "elapsed_ms": 0.0, "attempts": attempts}


def run_of(job: BatchInput, attempt: int, settings: RunSettings, name: str,
           sha256: str, journal: JournalSpec | None = None) -> RunJob:
    """The run of one input, for the executor (spearpy/executors)."""
    return RunJob(key=f"{job.index}/{attempt}", module=name, sha256=sha256,
                  args=list(job.argv), env={**settings.env, **job.env}, stdin=job.stdin,
                  dirs=settings.dirs, invoke=settings.invoke, collect_events=settings.events,
                  journal=journal)


def record_of(job: BatchInput, attempt: int, result: RunResult | None,
              error: BaseException | None, *, transcripts: bool = False,
              events: bool = False) -> dict[str, Any]:
    """An input's result line from how its run ended. A guest's or the host's
    failure is a record like any other: the batch goes on."""
    if result is None:
        return failure_record(job, "host_error", f"{type(error).__name__}: {error}", attempt)
    record = result_record(job, result, attempt, transcripts)
    if events:
        # The run id names its transcript files and events.
        record["run_id"] = result.run_id
        record[EVENTS_KEY] = result.events
    return record
