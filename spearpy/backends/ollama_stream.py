"""Ollama's streamed `/api/chat` replies: newline-delimited JSON in, the body
Ollama would have sent without streaming out, text deltas handed on as they
arrive.

Each line is one JSON object: `message.content` carries the next piece of
text, `message.tool_calls` whole calls (Ollama does not split a call across
lines), and the last line has `done: true` with `done_reason` and the token
counts. A line `{"error": "..."}` ends the stream with that error.

The stream is the upstream's: a line may grow to MAX_EVENT_BYTES and no
further (one that never ends is refused there, long before the response cap),
each chunk is scanned once, lines that are not JSON objects are skipped, and
tool calls are bounded like sse.py bounds an OpenAI stream's.
"""

from __future__ import annotations

from typing import Any

from spearpy.backends.sse import (
    MAX_STREAMED_CALLS,
    DeltaSink,
    SseError,
    check_event_size,
    error_text,
    json_object,
)
from spearpy.chat.protocol import JSONDict

# The fields of the final line that the body keeps (the rest are timings).
_FINAL_FIELDS = ("model", "created_at", "done_reason", "prompt_eval_count", "eval_count")
_LINE = "an NDJSON line"


class NDJSONFramer:
    """Splits a byte stream into its non-blank lines (LF or CRLF)."""

    def __init__(self) -> None:
        self._pending = bytearray()  # the line not ended yet

    def feed(self, chunk: bytes) -> list[bytes]:
        """The lines this chunk completes; SseError for a line past MAX_EVENT_BYTES."""
        lines = chunk.split(b"\n")
        done: list[bytes] = []
        if len(lines) > 1:
            self._pending += lines[0]
            lines[0] = bytes(self._pending)
            self._pending.clear()
            for line in lines[:-1]:
                check_event_size(len(line), _LINE)
                line = line.strip()
                if line:
                    done.append(line)
        self._pending += lines[-1]
        check_event_size(len(self._pending), _LINE)
        return done

    def close(self) -> list[bytes]:
        """The last line, when the stream ended without a newline after it."""
        return self.feed(b"\n") if self._pending else []


class OllamaStream:
    """Assembles `/api/chat` stream lines into one non-streamed `/api/chat` body."""

    def __init__(self, on_delta: DeltaSink | None) -> None:
        self._on_delta = on_delta
        self._text: list[str] = []
        self._calls: list[Any] = []
        self._final: JSONDict = {}
        self._lines = 0
        self.done = False

    def event(self, payload: bytes) -> None:
        line = json_object(payload)
        if line is None:
            return
        if "error" in line:
            raise SseError(error_text(line["error"]))
        message = line.get("message")
        if not isinstance(message, dict) and line.get("done") is not True:
            return
        self._lines += 1
        if isinstance(message, dict):
            self._message(message)
        if line.get("done") is True:
            self.done = True
            self._final = {k: line[k] for k in _FINAL_FIELDS if k in line}
        elif "model" in line and "model" not in self._final:
            self._final["model"] = line["model"]

    def _message(self, message: JSONDict) -> None:
        text = message.get("content")
        if isinstance(text, str) and text:
            self._text.append(text)
            if self._on_delta is not None:
                self._on_delta(text)
        calls = message.get("tool_calls")
        if isinstance(calls, list):
            room = MAX_STREAMED_CALLS - len(self._calls)
            self._calls.extend(calls[:max(room, 0)])

    def body(self) -> JSONDict:
        if not self._lines:
            raise SseError("the upstream stream carried no chat line")
        if not self.done:
            # A stream cut short reads like a finished answer that says less.
            raise SseError("the upstream stream ended before its final line (done: true)")
        message: JSONDict = {"role": "assistant", "content": "".join(self._text)}
        if self._calls:
            message["tool_calls"] = self._calls
        return {**self._final, "message": message, "done": True}

