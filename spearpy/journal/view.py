"""A journal as lines for a terminal: seq, kind, a short summary per record.

What a record holds came from the outside world (a model, a tool, a user
stream): every summary goes through _term.one_line, so its control
characters are shown escaped, never obeyed.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from spearpy._term import one_line
from spearpy.journal.records import (
    HOSTCALL,
    Codec,
    End,
    Record,
    Start,
    Step,
    hostcall_writes,
    kind_of,
)

SUMMARY_CHARS = 100


def lines(records: Iterable[Record]) -> Iterator[str]:
    """One line per record, as `spearpy show JOURNAL` prints them."""
    for record in records:
        yield f"{record.seq:>6}  {one_line(record.kind, 40):<20}  {summary(record)}"


def summary(record: Record, redact: Callable[[str], str] | None = None) -> str:
    """The record in one line of at most SUMMARY_CHARS. `redact` runs before
    the line is cut: a secret cut in two would no longer be recognised."""
    text = _text(record)
    return one_line(redact(text) if redact is not None else text, SUMMARY_CHARS)


def _text(record: Record) -> str:
    if isinstance(record, Start):
        stdin = f"{record.stdin_length} bytes" + ("" if record.stdin is not None
                                                  else ", not stored")
        text = (f"module {record.module_sha256[:12]}, argv {_json(list(record.argv))}, "
                f"stdin {stdin}, {len(record.env_names)} env names, flags {_json(record.flags)}, "
                f"spearpy {record.spearpy_version}")
    elif isinstance(record, End):
        text = f"{record.outcome}, exit code {record.exit_code}"
    elif record.kind == HOSTCALL:
        text = _hostcall(record)
    else:
        request = f"sha256 {record.request_sha256[:12]}" if record.request_sha256 \
            else _json(record.request)
        if kind_of(record.kind).answer is Codec.DIGEST:
            answer = f"sha256 {str(record.answer)[:12]} (checked)"
        else:
            answer = _json(record.answer)
        text = answer if record.request is None and record.request_sha256 is None \
            else f"{request} -> {answer}"
    return text


def _hostcall(step: Step) -> str:
    """`call(args) -> rc R, N bytes at ADDR, t T ms`: the bytes by size, not content."""
    call = f"sha256 {step.request_sha256[:12]}" if step.request_sha256 else \
        f"{step.request['call']}({', '.join(map(str, step.request['args']))})"
    writes = "".join(f", {len(data)} bytes at {address}"
                     for address, data in hostcall_writes(step.answer))
    return f"{call} -> rc {step.answer['rc']}{writes}, t {step.answer['t']:.1f} ms"


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
