"""`--events FILE.jsonl`: every event as one JSON object per line, in order."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import IO, Any

from spearpy.observe.events import TOOL_END, TOOL_START, Event
from spearpy.observe.redact import Redactor, short_sha256

# Which content field each tool event carries, and the name of its hash.
_CONTENT_FIELDS = {TOOL_START: ("arguments", "args_sha256"),
                   TOOL_END: ("output", "output_sha256")}


def event_record(event: Event, *, include_content: bool = False) -> dict[str, Any]:
    """The JSON object written for an event: its data, a short hash of a tool's
    arguments or output, and the text itself only when asked for."""
    record = event.as_dict()
    fields = _CONTENT_FIELDS.get(event.kind)
    if fields is not None and event.content is not None:
        name, hash_name = fields
        text = event.content.get(name)
        if isinstance(text, str):
            record[hash_name] = short_sha256(text)
            if include_content:
                record[name] = text
    return record


class JsonlEventWriter:
    """An event sink appending to a JSONL file; thread-safe, flushed per line so
    a run that dies still leaves every event it emitted."""

    def __init__(self, target: str | os.PathLike[str] | IO[str], *,
                 include_content: bool = False, redactor: Redactor | None = None) -> None:
        if isinstance(target, str | os.PathLike):
            path = Path(target)
            path.parent.mkdir(parents=True, exist_ok=True)
            self._stream: IO[str] = path.open("w", encoding="utf-8")
            self._owned = True
        else:
            self._stream, self._owned = target, False
        self.include_content = include_content
        self._redactor = redactor or Redactor()
        self._lock = threading.Lock()
        self.count = 0

    def __call__(self, event: Event) -> None:
        record = self._redactor.value(event_record(event, include_content=self.include_content))
        line = json.dumps(record, separators=(",", ":"), ensure_ascii=False, default=str)
        with self._lock:
            if self._stream.closed:
                return
            self._stream.write(line + "\n")
            self._stream.flush()
            self.count += 1

    def close(self) -> None:
        with self._lock:
            if self._owned and not self._stream.closed:
                self._stream.close()

    def __enter__(self) -> JsonlEventWriter:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()
