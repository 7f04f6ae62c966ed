"""The scripted model's streamed replies: a finished completion cut into the
Server-Sent Events a real server sends for `stream: true`.

Text is cut into word-sized pieces and tool-call arguments into a few
fragments, so a client must really join deltas to get the reply back; the
joined reply equals the one the same script gives without streaming.
"""

from __future__ import annotations

import json
import re
from typing import Any

from spearpy.backends.scripted.reply import JSONDict, dumps

_PIECES = re.compile(r"\s*\S+\s*|\s+")


def pieces(text: str) -> list[str]:
    return _PIECES.findall(text) or [text]


def _event(payload: Any, name: str | None = None) -> bytes:
    head = f"event: {name}\n" if name else ""
    text = payload if isinstance(payload, str) else dumps(payload)
    return f"{head}data: {text}\n\n".encode()


def openai_events(completion: JSONDict, include_usage: bool) -> list[bytes]:
    """chat.completion.chunk events, then [DONE]."""
    head = {"id": completion.get("id"), "object": "chat.completion.chunk",
            "created": completion.get("created"), "model": completion.get("model")}
    choice = (completion.get("choices") or [{}])[0]
    message = choice.get("message") or {}

    def chunk(delta: JSONDict, finish: Any = None) -> bytes:
        return _event({**head, "choices": [{"index": 0, "delta": delta,
                                            "finish_reason": finish}]})

    events = [chunk({"role": message.get("role", "assistant"), "content": ""})]
    content = message.get("content")
    if isinstance(content, str) and content:
        events += [chunk({"content": piece}) for piece in pieces(content)]
    for index, call in enumerate(message.get("tool_calls") or []):
        function = call.get("function") or {}
        arguments = str(function.get("arguments", ""))
        half = len(arguments) // 2
        events.append(chunk({"tool_calls": [{"index": index, "id": call.get("id"),
                                             "type": call.get("type", "function"),
                                             "function": {"name": function.get("name"),
                                                          "arguments": arguments[:half]}}]}))
        events.append(chunk({"tool_calls": [{"index": index,
                                             "function": {"arguments": arguments[half:]}}]}))
    events.append(chunk({}, choice.get("finish_reason")))
    if include_usage and completion.get("usage") is not None:
        events.append(_event({**head, "choices": [], "usage": completion["usage"]}))
    events.append(_event("[DONE]"))
    return events


def anthropic_events(message: JSONDict) -> list[bytes]:
    """Messages API stream events for a finished `message`."""
    start = {**message, "content": [], "stop_reason": None}
    usage = message.get("usage") or {}
    start["usage"] = {"input_tokens": usage.get("input_tokens", 0), "output_tokens": 0}
    events = [_event({"type": "message_start", "message": start}, "message_start")]
    for index, block in enumerate(message.get("content") or []):
        if block.get("type") == "tool_use":
            opened = {"type": "tool_use", "id": block.get("id"), "name": block.get("name"),
                      "input": {}}
            text = json.dumps(block.get("input", {}), separators=(",", ":"))
            half = len(text) // 2
            deltas = [{"type": "input_json_delta", "partial_json": part}
                      for part in (text[:half], text[half:])]
        else:
            opened = {"type": "text", "text": ""}
            deltas = [{"type": "text_delta", "text": piece}
                      for piece in pieces(str(block.get("text", "")))]
        events.append(_event({"type": "content_block_start", "index": index,
                              "content_block": opened}, "content_block_start"))
        events += [_event({"type": "content_block_delta", "index": index, "delta": delta},
                          "content_block_delta") for delta in deltas]
        events.append(_event({"type": "content_block_stop", "index": index},
                             "content_block_stop"))
    events.append(_event({"type": "message_delta",
                          "delta": {"stop_reason": message.get("stop_reason")},
                          "usage": {"output_tokens": usage.get("output_tokens", 0)}},
                         "message_delta"))
    events.append(_event({"type": "message_stop"}, "message_stop"))
    return events
