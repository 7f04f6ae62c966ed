"""Streamed completions (`stream: true`): Server-Sent Events in, one assembled
body out, text deltas handed to a callback as they arrive.

The body an assembler builds is the one the same upstream would have sent
without streaming, so the guest cannot tell the difference: OpenAI chunks
become a `chat.completion` (tool calls joined from their indexed deltas,
usage from the final chunk that `stream_options.include_usage` asks for);
Anthropic's events become a Messages API `message` for the dialect's usual
decoding. Upstream text is untrusted: chunks that are not JSON objects, or
indexes that make no sense, are skipped or bounded, never trusted.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from spearpy import _json
from spearpy.chat.protocol import JSONDict
from spearpy.errors import SpearpyError
from spearpy.observe.scrub import SecretScrubber

DeltaSink = Callable[[str], None]
# Parallel tool calls in one reply; an index past this is a hostile chunk.
MAX_STREAMED_CALLS = 128
# One event's data: far more than any delta; the whole response is bounded
# separately (httpbackend.MAX_RESPONSE_BYTES).
MAX_EVENT_BYTES = 8 << 20


class SSEDecoder:
    """Splits a byte stream into the data payloads of its events.

    Only `data:` fields matter to chat completions (`event:` names the
    Anthropic event type, which its JSON repeats). Lines end in LF, CRLF or
    CR; a blank line ends an event.

    The stream is the upstream's: each chunk is scanned once (a line that
    never ends used to be rescanned whole at every chunk, quadratic), and an
    event, or a line, may grow to MAX_EVENT_BYTES and no further.
    """

    def __init__(self) -> None:
        self._pending = bytearray()  # the line not ended yet
        self._data: list[bytes] = []
        self._data_bytes = 0
        self._after_cr = False  # a CR ended the last chunk: a LF opening this one is its pair

    def feed(self, chunk: bytes) -> list[bytes]:
        """The payloads of the events this chunk completes; SseError for an
        event past MAX_EVENT_BYTES."""
        if self._after_cr and chunk[:1] == b"\n":
            chunk = chunk[1:]
        self._after_cr = chunk[-1:] == b"\r"
        lines = chunk.replace(b"\r\n", b"\n").replace(b"\r", b"\n").split(b"\n")
        done: list[bytes] = []
        if len(lines) > 1:
            self._pending += lines[0]
            lines[0] = bytes(self._pending)
            self._pending.clear()
            for line in lines[:-1]:
                self._line(line, done)
        self._pending += lines[-1]
        check_event_size(self._data_bytes + len(self._pending))
        return done

    def _line(self, line: bytes, done: list[bytes]) -> None:
        if not line:
            if self._data:
                done.append(b"\n".join(self._data))
                self._data = []
                self._data_bytes = 0
        elif line.startswith(b"data:"):
            value = line[5:]
            value = value[1:] if value.startswith(b" ") else value
            self._data.append(value)
            self._data_bytes += len(value) + 1
            check_event_size(self._data_bytes)

    def close(self) -> list[bytes]:
        """Payloads of an event the stream ended without a blank line after."""
        done = self.feed(b"\n\n") if self._pending or self._data else []
        return done


class SseError(SpearpyError):
    """A stream that cannot become a completion (an error event, no chunk)."""


def check_event_size(size: int, what: str = "an event") -> None:
    """SseError when one event (`what`) of a stream has grown past MAX_EVENT_BYTES."""
    if size > MAX_EVENT_BYTES:
        raise SseError(f"the upstream sent {what} of more than {MAX_EVENT_BYTES} bytes")


class OpenAIStream:
    """Assembles `chat.completion.chunk` events into a `chat.completion`."""

    def __init__(self, on_delta: DeltaSink | None) -> None:
        self._on_delta = on_delta
        self._head: JSONDict = {}
        self._text: list[str] = []
        self._role = "assistant"
        self._calls: dict[int, JSONDict] = {}
        self._finish: Any = None
        self._usage: Any = None
        self._chunks = 0
        self.done = False

    def event(self, payload: bytes) -> None:
        if payload.strip() == b"[DONE]":
            self.done = True
            return
        chunk = json_object(payload)
        if chunk is None:
            return
        if isinstance(chunk.get("error"), dict):
            raise SseError(error_text(chunk["error"]))
        self._chunks += 1
        for key in ("id", "created", "model", "system_fingerprint"):
            if key in chunk and key not in self._head:
                self._head[key] = chunk[key]
        if isinstance(chunk.get("usage"), dict):
            self._usage = chunk["usage"]
        choices = chunk.get("choices")
        if not isinstance(choices, list):
            return
        for choice in choices:
            if isinstance(choice, dict) and choice.get("index", 0) == 0:
                self._choice(choice)

    def _choice(self, choice: JSONDict) -> None:
        if choice.get("finish_reason") is not None:
            self._finish = choice["finish_reason"]
        delta = choice.get("delta")
        if not isinstance(delta, dict):
            return
        if isinstance(delta.get("role"), str):
            self._role = delta["role"]
        text = delta.get("content")
        if isinstance(text, str) and text:
            self._text.append(text)
            if self._on_delta is not None:
                self._on_delta(text)
        calls = delta.get("tool_calls")
        if isinstance(calls, list):
            for call in calls:
                if isinstance(call, dict):
                    self._call_delta(call)

    def _call_delta(self, delta: JSONDict) -> None:
        index = delta.get("index", len(self._calls))
        if not isinstance(index, int) or not 0 <= index < MAX_STREAMED_CALLS:
            return
        call = self._calls.setdefault(index, {"id": None, "type": "function",
                                              "function": {"name": "", "arguments": ""}})
        if isinstance(delta.get("id"), str):
            call["id"] = delta["id"]
        if isinstance(delta.get("type"), str):
            call["type"] = delta["type"]
        function = delta.get("function")
        if isinstance(function, dict):
            for key in ("name", "arguments"):
                if isinstance(function.get(key), str):
                    call["function"][key] += function[key]

    def body(self) -> JSONDict:
        if not self._chunks:
            raise SseError("the upstream stream carried no completion chunk")
        message: JSONDict = {"role": self._role,
                             "content": "".join(self._text) if self._text else None}
        if self._calls:
            message["tool_calls"] = [self._calls[i] for i in sorted(self._calls)]
        elif message["content"] is None:
            message["content"] = ""
        out: JSONDict = {"id": self._head.get("id"), "object": "chat.completion",
                         **{k: v for k, v in self._head.items() if k != "id"},
                         "choices": [{"index": 0, "message": message,
                                      "finish_reason": self._finish}]}
        if self._usage is not None:
            out["usage"] = self._usage
        return out


class AnthropicStream:
    """Assembles Messages API stream events into a Messages API `message`."""

    def __init__(self, on_delta: DeltaSink | None) -> None:
        self._on_delta = on_delta
        self._message: JSONDict | None = None
        self._blocks: dict[int, JSONDict] = {}
        self._json: dict[int, list[str]] = {}
        self.done = False

    def event(self, payload: bytes) -> None:
        event = json_object(payload)
        if event is None:
            return
        kind = event.get("type")
        if kind == "error":
            error = event.get("error")
            raise SseError(error_text(error if isinstance(error, dict) else {}))
        if kind == "message_start" and isinstance(event.get("message"), dict):
            self._message = dict(event["message"])
            self._message["content"] = []
        elif kind == "content_block_start":
            index, block = event.get("index"), event.get("content_block")
            if isinstance(index, int) and _valid_index(index) and isinstance(block, dict):
                self._blocks[index] = dict(block)
        elif kind == "content_block_delta":
            self._delta(event.get("index"), event.get("delta"))
        elif kind == "message_delta" and self._message is not None:
            delta = event.get("delta")
            if isinstance(delta, dict) and "stop_reason" in delta:
                self._message["stop_reason"] = delta["stop_reason"]
            if isinstance(event.get("usage"), dict):
                usage = self._message.setdefault("usage", {})
                if isinstance(usage, dict):
                    usage.update(event["usage"])
        elif kind == "message_stop":
            self.done = True

    def _delta(self, index: Any, delta: Any) -> None:
        if not isinstance(index, int) or not _valid_index(index) or not isinstance(delta, dict):
            return
        block = self._blocks.setdefault(index, {"type": "text", "text": ""})
        if delta.get("type") == "text_delta" and isinstance(delta.get("text"), str):
            block["text"] = str(block.get("text", "")) + delta["text"]
            if self._on_delta is not None and delta["text"]:
                self._on_delta(delta["text"])
        elif delta.get("type") == "input_json_delta" \
                and isinstance(delta.get("partial_json"), str):
            self._json.setdefault(index, []).append(delta["partial_json"])

    def body(self) -> JSONDict:
        if self._message is None:
            raise SseError("the upstream stream carried no message_start event")
        for index in sorted(self._blocks):
            block = self._blocks[index]
            if block.get("type") == "tool_use" and index in self._json:
                text = "".join(self._json[index])
                try:
                    block["input"] = _json.loads(text) if text.strip() else {}
                except (ValueError, RecursionError):
                    raise SseError(f"tool_use block {index} streamed arguments that are "
                                      "not JSON") from None
            self._message["content"].append(block)
        return self._message


def _valid_index(index: Any) -> bool:
    return isinstance(index, int) and not isinstance(index, bool) \
        and 0 <= index < MAX_STREAMED_CALLS


def json_object(payload: bytes) -> JSONDict | None:
    """The event's JSON object; None for anything else (skipped, never trusted)."""
    try:
        value = _json.loads(payload)
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def error_text(error: Any) -> str:
    """An error event's message, bounded: `{"message": ...}` (OpenAI,
    Anthropic) or the text itself (Ollama; an empty one says nothing)."""
    message = error.get("message") if isinstance(error, dict) else error or None
    return message[:1000] if isinstance(message, str) else "the upstream stream failed"


class StreamAssembler(Protocol):
    done: bool

    def event(self, payload: bytes) -> None: ...

    def body(self) -> JSONDict: ...


class Framer(Protocol):
    """Splits a streamed body into the payloads of its events (SSE: `data:`
    fields; Ollama's NDJSON: lines), each bounded by MAX_EVENT_BYTES."""

    def feed(self, chunk: bytes) -> list[bytes]: ...

    def close(self) -> list[bytes]: ...


class StreamReader:
    """Feeds a streamed reply's events, secrets removed, to the dialect's assembler."""

    def __init__(self, scrubber: SecretScrubber, assembler: StreamAssembler,
                 guard: DeltaGuard | None, framer: Framer | None = None) -> None:
        self._decoder: Framer = framer if framer is not None else SSEDecoder()
        self._scrubber = scrubber
        self._assembler = assembler
        self._guard = guard

    def feed(self, chunk: bytes) -> None:
        for payload in self._decoder.feed(chunk):
            self._assembler.event(self._scrubber.raw(payload))

    def finish(self) -> JSONDict:
        for payload in self._decoder.close():
            self._assembler.event(self._scrubber.raw(payload))
        if self._guard is not None:
            self._guard.flush()
        return self._assembler.body()


class DeltaGuard:
    """Passes streamed text on with secrets removed, even a secret split across
    deltas: the last few characters wait for the next delta (or the end)
    before they are scrubbed and sent."""

    def __init__(self, scrubber: SecretScrubber, sink: DeltaSink) -> None:
        self._scrubber = scrubber
        self._sink = sink
        longest = max((len(s) for s in scrubber.secrets), default=0)
        self._hold = max(longest - 1, 0)
        # An escaped spelling is up to ~8 characters per character of the key.
        self._hold_escaped = 8 * longest
        self._pending = ""

    def feed(self, text: str) -> None:
        if not self._hold:
            self._sink(text)
            return
        window = self._scrubber.text(self._pending + text)
        hold = self._hold_escaped if "\\" in window else self._hold
        if len(window) > hold:
            self._sink(window[:len(window) - hold])
            window = window[len(window) - hold:]
        self._pending = window

    def flush(self) -> None:
        if self._pending:
            rest, self._pending = self._scrubber.text(self._pending), ""
            self._sink(rest)
