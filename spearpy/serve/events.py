"""Events as the service stores and streams them: the `--events` record
(spearpy.observe.jsonl.event_record), with tool arguments and results when
the operator allows content, cut to a size, and scrubbed of secrets before
they reach the store, a subscriber or a page."""

from __future__ import annotations

import json
import time
from typing import Any

from spearpy.observe.events import SESSION_CLOSE, Event
from spearpy.observe.jsonl import event_record
from spearpy.observe.redact import Redactor, short_sha256
from spearpy.observe.transcripts import truncate_tool_contents
from spearpy.serve.store import EventRow

_CONTENT = ("arguments", "output")
TOKEN = "token"  # streamed text deltas (spearpy.observe.events.TOKEN where streaming exists)


def cut_text(text: str, limit: int) -> str:
    raw = text.encode("utf-8", "surrogatepass")
    if len(raw) <= limit:
        return text
    kept = raw[:limit].decode("utf-8", "ignore")  # never half a character
    return f"{kept}\n[spearpy: cut, {len(raw)} bytes in full, sha256 {short_sha256(raw)}]"


class EventEncoder:
    def __init__(self, redactor: Redactor, *, content: bool, max_content_bytes: int) -> None:
        self._redactor = redactor
        self._content = content
        self._max = max_content_bytes

    def redact(self, value: Any) -> Any:
        return self._redactor.value(value)

    def record(self, event: Event) -> dict[str, Any]:
        record = event_record(event, include_content=self._content)
        if self._content:
            for name in _CONTENT:
                if isinstance(record.get(name), str):
                    record[name] = cut_text(record[name], self._max)
            if event.kind == SESSION_CLOSE and event.content:
                record["transcript"] = self._transcript(event.content.get("transcript"))
            elif event.kind == TOKEN and event.content:
                # A streamed delta: the live view appends it to the reply.
                text = event.content.get("text")
                if isinstance(text, str):
                    record["text"] = cut_text(text, self._max)
        redacted: dict[str, Any] = self._redactor.value(record)
        return redacted

    def _transcript(self, transcript: Any) -> Any:
        if not isinstance(transcript, dict):
            return None
        messages, _cut = truncate_tool_contents(list(transcript.get("messages", [])), self._max)
        shown = {"session_fd": transcript.get("session_fd"), "messages": messages}
        size = len(json.dumps(shown, default=str))
        if size > 8 * self._max:  # many long turns: the run record has it whole
            return {"session_fd": transcript.get("session_fd"), "omitted_bytes": size}
        return shown

    def row(self, event: Event) -> EventRow:
        line = json.dumps(self.record(event), separators=(",", ":"), ensure_ascii=False,
                          default=str)
        return event.seq, event.kind, line

    def synthetic_end(self, seq: int, outcome: str, exit_code: int | None) -> EventRow:
        """The end event of a run the host never started (it raised first), so
        every stream still ends with `run_end`."""
        record = {"kind": "run_end", "run_id": None, "seq": seq, "ts": time.time(),
                  "fd": None, "outcome": outcome, "exit_code": exit_code,
                  "elapsed_ms": None, "service": True}
        return seq, "run_end", json.dumps(record, separators=(",", ":"))
