"""Hostile streams: an upstream's Server-Sent Events, well-formed or not, cut
anywhere, either assemble into exactly the body their events describe or end
in a SseError that says why; nothing else escapes.

The generator writes real SSE (`data:` lines carrying JSON chunks, partial or
malformed ones, non-objects, error events, `[DONE]`, other fields and
comments, LF or CRLF) and records what each event means. The expected outcome
is worked out from those meanings, not by parsing the wire again, and compared
with what SSEDecoder and the assembler made of the bytes.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from spearpy.backends.sse import AnthropicStream, OpenAIStream, SSEDecoder, SseError

TEXT = st.text(st.characters(codec="utf-8"), max_size=12)
JUNK = st.one_of(
    st.binary(max_size=40).map(lambda b: b"\xff" + b.replace(b"\r", b"").replace(b"\n", b"")),
    st.sampled_from([b"[1,2]", b'"text"', b"3", b"null", b"{", b'{"choices":', b"[DONE"]))


def _dumps(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


@dataclass
class Expected:
    """What a stream's events add up to."""

    error: str | None = None  # the message of the first error event
    chunks: int = 0
    texts: list[str] = field(default_factory=list)
    calls: dict[int, dict[str, str]] = field(default_factory=dict)
    finish: Any = None
    done: bool = False


# ---- OpenAI: chat.completion.chunk events --------------------------------------

def _chunk(choices: Any, **extra: Any) -> dict[str, Any]:
    return {"id": "c1", "object": "chat.completion.chunk", "choices": choices, **extra}


def _openai_text(text: str) -> tuple[bytes, Any]:
    return _dumps(_chunk([{"index": 0, "delta": {"content": text}}])), ("text", text)


def _openai_call(index: int, name: str, arguments: str) -> tuple[bytes, Any]:
    delta = {"tool_calls": [{"index": index, "id": f"id{index}",
                             "function": {"name": name, "arguments": arguments}}]}
    return _dumps(_chunk([{"index": 0, "delta": delta}])), ("call", index, name, arguments)


OPENAI_NOTHING = [  # chunks that count as chunks but add nothing to the reply
    _chunk("x"), _chunk([{"index": 0, "delta": "x"}]), _chunk(["x", 3]),
    _chunk([{"index": 1, "delta": {"content": "another choice"}}]),
    _chunk([{"index": 0, "delta": {"tool_calls": [{"index": -1, "function": {"name": "n"}},
                                                  {"index": 10**9}, {"index": "0"}, "x"]}}]),
    _chunk([{"index": 0, "delta": {"content": 5, "role": 7}}]), {"usage": "none"},
]
OPENAI_EVENT = st.one_of(
    st.builds(_openai_text, TEXT),
    st.builds(_openai_call, st.integers(0, 2), st.sampled_from(["", "f", "g_"]), TEXT),
    st.sampled_from(OPENAI_NOTHING).map(lambda c: (_dumps(c), ("chunk",))),
    st.sampled_from(["stop", "tool_calls", "length"]).map(
        lambda r: (_dumps(_chunk([{"index": 0, "delta": {}, "finish_reason": r}])),
                   ("finish", r))),
    st.builds(lambda t, cut: (_openai_text(t)[0][:cut], ("junk",)), TEXT, st.integers(1, 20)),
    JUNK.map(lambda b: (b, ("junk",))),
    st.just((b"[DONE]", ("done",))),
)
OPENAI_ERROR = TEXT.map(lambda m: (_dumps({"error": {"message": m, "code": "x"}}), ("error", m)))


def _openai_expected(meanings: list[Any]) -> Expected:
    out = Expected()
    for meaning in meanings:
        kind = meaning[0]
        if kind == "error":
            out.error = meaning[1]
            return out
        if kind == "done":
            out.done = True
        if kind in ("text", "call", "chunk", "finish"):
            out.chunks += 1
        if kind == "text":
            out.texts.append(meaning[1])
        elif kind == "call":
            _, index, name, arguments = meaning
            call = out.calls.setdefault(index, {"name": "", "arguments": ""})
            call["name"] += name
            call["arguments"] += arguments
        elif kind == "finish":
            out.finish = meaning[1]
    return out


# ---- Anthropic: Messages API events ----------------------------------------------

def _anthropic(event: dict[str, Any]) -> bytes:
    return _dumps(event)


MESSAGE_START = _anthropic({"type": "message_start", "message": {
    "id": "m1", "type": "message", "role": "assistant", "model": "claude", "content": [],
    "stop_reason": None, "usage": {"input_tokens": 3, "output_tokens": 0}}})
HOSTILE_ANTHROPIC: list[dict[str, Any]] = [  # events that change nothing
    {"type": "content_block_delta", "index": -1, "delta": {"type": "x"}},
    {"type": "content_block_delta", "index": 0, "delta": "x"},
    {"type": "content_block_start", "index": 10**9, "content_block": {}},
    {"type": "ping"}, {"type": 5}, {"no": "type"}]
ANTHROPIC_EVENT = st.one_of(
    st.just((MESSAGE_START, ("start",))),
    TEXT.map(lambda t: (_anthropic({"type": "content_block_delta", "index": 0,
                                    "delta": {"type": "text_delta", "text": t}}), ("text", t))),
    st.sampled_from(['{"a":', "[1,", "2]}", "", "x"]).map(
        lambda j: (_anthropic({"type": "content_block_delta", "index": 1,
                               "delta": {"type": "input_json_delta", "partial_json": j}}),
                   ("json", j))),
    st.sampled_from(["end_turn", "tool_use"]).map(
        lambda r: (_anthropic({"type": "message_delta", "delta": {"stop_reason": r}}),
                   ("finish", r))),
    st.sampled_from(HOSTILE_ANTHROPIC).map(lambda e: (_anthropic(e), ("chunk",))),
    st.builds(lambda cut: (MESSAGE_START[:cut], ("junk",)), st.integers(1, 40)),
    JUNK.map(lambda b: (b, ("junk",))),
    st.just((_anthropic({"type": "message_stop"}), ("done",))),
)
ANTHROPIC_ERROR = TEXT.map(lambda m: (_anthropic({"type": "error", "error": {
    "type": "overloaded_error", "message": m}}), ("error", m)))
# Every Anthropic stream here opens its text block and its tool_use block first.
BLOCKS = [_anthropic({"type": "content_block_start", "index": 0,
                      "content_block": {"type": "text", "text": ""}}),
          _anthropic({"type": "content_block_start", "index": 1, "content_block": {
              "type": "tool_use", "id": "t1", "name": "f", "input": {}}})]


# ---- the wire ----------------------------------------------------------------------

@st.composite
def wire(draw: st.DrawFn, events: st.SearchStrategy[tuple[bytes, Any]],
         error: st.SearchStrategy[tuple[bytes, Any]]
         ) -> tuple[list[bytes], list[Any], list[bytes]]:
    """(payloads, their meanings, the SSE bytes cut into pieces); an error
    event in about one stream in four, so most reach the assembled body."""
    drawn = draw(st.lists(events, max_size=25))
    if draw(st.integers(0, 3)) == 3:  # 0, where hypothesis starts, is the common case
        drawn.insert(draw(st.integers(0, len(drawn))), draw(error))
    payloads, meanings = [p for p, _ in drawn], [m for _, m in drawn]
    newline = draw(st.sampled_from([b"\n", b"\r\n"]))
    text = b""
    for payload in payloads:
        extra = draw(st.sampled_from([b"", b"event: x", b": a comment", b"id: 7", b"retry: x"]))
        space = draw(st.sampled_from([b" ", b""]))
        text += (extra + newline if extra else b"") + b"data:" + space + payload + newline * 2
    cuts = sorted(draw(st.lists(st.integers(0, len(text)), max_size=12)))
    pieces = [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True)]
    return payloads, meanings, pieces


def _decode(pieces: list[bytes]) -> list[bytes]:
    decoder = SSEDecoder()
    out = [payload for piece in pieces for payload in decoder.feed(piece)]
    return out + decoder.close()


@settings(max_examples=300, deadline=None)
@given(stream=wire(OPENAI_EVENT, OPENAI_ERROR))
def test_hostile_openai_streams_assemble_or_fail_cleanly(
        stream: tuple[list[bytes], list[Any], list[bytes]]) -> None:
    payloads, meanings, pieces = stream
    assert _decode(pieces) == payloads  # every cut gives the events back, whole
    expected = _openai_expected(meanings)
    deltas: list[str] = []
    assembler = OpenAIStream(deltas.append)
    if expected.error is not None:
        with pytest.raises(SseError) as raised:
            for payload in payloads:
                assembler.event(payload)
        assert str(raised.value) == expected.error[:1000]
        event("an error event")
        return
    for payload in payloads:
        assembler.event(payload)
    assert assembler.done == expected.done
    assert deltas == [t for t in expected.texts if t]
    if not expected.chunks:
        with pytest.raises(SseError, match="no completion chunk"):
            assembler.body()
        event("no chunk")
        return
    body = assembler.body()
    message = body["choices"][0]["message"]
    content = "".join(expected.texts)
    assert message["content"] == (content or (None if expected.calls else ""))
    assert body["choices"][0]["finish_reason"] == expected.finish
    calls = [{"id": f"id{i}", "type": "function", "function": expected.calls[i]}
             for i in sorted(expected.calls)]
    assert message.get("tool_calls", []) == calls
    event("a body with tool calls" if calls else "a body")


@settings(max_examples=300, deadline=None)
@given(stream=wire(ANTHROPIC_EVENT, ANTHROPIC_ERROR), unopened=st.integers(0, 3))
def test_hostile_anthropic_streams_assemble_or_fail_cleanly(
        stream: tuple[list[bytes], list[Any], list[bytes]], unopened: int) -> None:
    payloads, meanings, pieces = stream
    assert _decode(pieces) == payloads
    deltas: list[str] = []
    assembler = AnthropicStream(deltas.append)
    if unopened != 3:  # most streams start as a real one does
        assembler.event(MESSAGE_START)
        meanings = [("start",), *meanings]
    for block in BLOCKS:
        assembler.event(block)
    errors = [m[1] for m in meanings if m[0] == "error"]
    if errors:
        with pytest.raises(SseError) as raised:
            for payload in payloads:
                assembler.event(payload)
        assert str(raised.value) == errors[0][:1000]
        event("an error event")
        return
    for payload in payloads:
        assembler.event(payload)
    texts = [m[1] for m in meanings if m[0] == "text"]
    assert deltas == [t for t in texts if t]
    assert assembler.done == any(m[0] == "done" for m in meanings)
    starts = [i for i, m in enumerate(meanings) if m[0] == "start"]
    if not starts:
        with pytest.raises(SseError, match="no message_start"):
            assembler.body()
        event("no message_start")
        return
    arguments = "".join(m[1] for m in meanings if m[0] == "json")
    try:
        tool_input = json.loads(arguments) if arguments.strip() else {}
    except ValueError:
        with pytest.raises(SseError, match="tool_use block 1 streamed arguments"):
            assembler.body()
        event("tool arguments not JSON")
        return
    message = assembler.body()
    assert message["content"] == [
        {"type": "text", "text": "".join(texts)},
        {"type": "tool_use", "id": "t1", "name": "f", "input": tool_input}]
    # A stop reason counts from the last message_start on (a restart begins anew).
    finishes = [m[1] for m in meanings[starts[-1]:] if m[0] == "finish"]
    assert message["stop_reason"] == (finishes[-1] if finishes else None)
    event("a message")
