"""Ollama's native `/api/chat` backend (SPEAR's `ollama_chat`), mapped both
ways to the OpenAI shape.

The session holds OpenAI-style messages and guests read an OpenAI-style chat
completion whichever backend answered. Going out: `developer` messages
become `system`; text parts are joined, inline (`data:`) images go in
`images`; assistant tool calls carry their arguments as objects; a tool
message names its tool (`tool_name`, from the call it answers); sampling
params go in `options` (`max_tokens` as `num_predict`), `response_format`
becomes `format`; `tool_choice` is emulated with the tool list as the
`ollama` quirk profile does for `/v1`. `stream` is always sent (Ollama
streams unless told not to). Coming back: `message.content` and
`message.tool_calls` become the choice's message (arguments as JSON strings,
ids made up when Ollama sends none: stable ones, so a replay asks the same),
`done_reason` the `finish_reason`, and `prompt_eval_count` / `eval_count`
the usage. Streams are newline-delimited JSON (ollama_stream.py).

Ollama needs no key: none is read unless `api_key_env` names one, which is
then sent as a bearer token (for a proxy in front of Ollama).
"""

from __future__ import annotations

import hashlib
import re
from datetime import datetime
from typing import Any

from spearpy import _json
from spearpy.backends.base import CompletionRequest
from spearpy.backends.httpbackend import DecodeError, HTTPBackend
from spearpy.backends.ollama_stream import NDJSONFramer, OllamaStream
from spearpy.backends.quirks import PROFILES
from spearpy.backends.sse import MAX_STREAMED_CALLS, DeltaSink, Framer
from spearpy.chat.protocol import JSONDict

# OpenAI parameters Ollama has no counterpart for; sent, they would land in
# `options`, where Ollama warns about each unknown one.
_DROPPED = frozenset({
    "tool_choice", "parallel_tool_calls", "n", "user", "logprobs", "top_logprobs",
    "logit_bias", "store", "stream_options", "metadata", "service_level",
    "max_tokens", "max_completion_tokens", "response_format", "options",
})  # fmt: skip
# Request fields that are Ollama's own, not generation options.
_TOP_LEVEL = frozenset({"format", "keep_alive", "think"})
_FINISH = {"stop": "stop", "length": "length", "load": "stop", "unload": "stop"}
_MAX_ID_LEN = 256
_STAMP = re.compile(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.\d{1,9})?(Z|[+-]\d\d:\d\d)?")


class OllamaBackend(HTTPBackend):
    kind = "ollama"
    path = "/api/chat"
    stream_media_type = "application/x-ndjson"

    def encode(self, request: CompletionRequest) -> JSONDict:
        body: JSONDict = {"model": request.model,
                          "messages": to_ollama_messages(request.messages)}
        tools = _offered_tools(request.tools, request.params.get("tool_choice"))
        if tools:
            body["tools"] = tools
        body.update(_top_level(request.params))
        options = _options(request.params)
        if options:
            body["options"] = options
        body["stream"] = request.stream
        return body

    def stream_assembler(self, on_delta: DeltaSink | None) -> OllamaStream:
        return OllamaStream(on_delta)

    def stream_framer(self) -> Framer:
        return NDJSONFramer()

    def decode(self, request: CompletionRequest, body: JSONDict) -> JSONDict:
        return from_ollama_chat(body, request.model)


# ---- out ----------------------------------------------------------------------


def _offered_tools(tools: list[JSONDict] | None, choice: Any) -> list[JSONDict] | None:
    if not tools:
        return None
    if choice is None:
        return tools
    # Ollama has no tool_choice: what the tool list can say, it says.
    prepared = PROFILES["ollama"].prepare({"tools": tools, "tool_choice": choice})
    kept = prepared.get("tools")
    return kept if isinstance(kept, list) else None


def _top_level(params: dict[str, Any]) -> JSONDict:
    out: JSONDict = {k: v for k, v in params.items() if k in _TOP_LEVEL}
    fmt = params.get("response_format")
    if isinstance(fmt, dict) and "format" not in out:
        if fmt.get("type") == "json_object":
            out["format"] = "json"
        elif fmt.get("type") == "json_schema" and isinstance(fmt.get("json_schema"), dict):
            schema = fmt["json_schema"].get("schema")
            if isinstance(schema, dict):
                out["format"] = schema
    return out


def _options(params: dict[str, Any]) -> JSONDict:
    given = params.get("options")
    options: JSONDict = dict(given) if isinstance(given, dict) else {}
    for key in ("max_tokens", "max_completion_tokens"):
        value = params.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            options.setdefault("num_predict", value)
    for key, value in params.items():
        if key in _DROPPED or key in _TOP_LEVEL:
            continue
        options.setdefault(key, [value] if key == "stop" and isinstance(value, str) else value)
    return options


def _text_and_images(content: Any) -> tuple[str, list[str]]:
    if isinstance(content, str):
        return content, []
    if not isinstance(content, list):
        return ("" if content is None else _json.compact(content)), []
    texts: list[str] = []
    images: list[str] = []
    for part in content:
        if not isinstance(part, dict):
            continue
        if isinstance(part.get("text"), str):
            texts.append(part["text"])
        image = part.get("image_url")
        url = image.get("url") if isinstance(image, dict) else image
        # Ollama takes images inline only (base64); a URL it would have to fetch is not sent.
        if isinstance(url, str) and url.startswith("data:") and ";base64," in url:
            images.append(url.split(";base64,", 1)[1])
    return "".join(texts), images


def _arguments(raw: Any) -> JSONDict:
    if isinstance(raw, dict):
        return raw
    try:
        value = _json.loads(raw) if isinstance(raw, str) and raw.strip() else {}
    except (ValueError, RecursionError):
        return {}
    return value if isinstance(value, dict) else {}


def _assistant_calls(message: JSONDict, names: dict[str, str]) -> list[JSONDict]:
    out: list[JSONDict] = []
    for call in message.get("tool_calls") or []:
        if not isinstance(call, dict):
            continue
        inner = call.get("function")
        fn: JSONDict = inner if isinstance(inner, dict) else call
        name = fn.get("name")
        if not isinstance(name, str):
            continue
        if isinstance(call.get("id"), str):
            names[call["id"]] = name
        out.append({"function": {"name": name, "arguments": _arguments(fn.get("arguments"))}})
    return out


def to_ollama_messages(messages: list[JSONDict]) -> list[JSONDict]:
    """`/api/chat` messages for an OpenAI-style history."""
    names: dict[str, str] = {}  # tool call id -> the tool's name, for tool messages
    out: list[JSONDict] = []
    for message in messages:
        role = message.get("role")
        text, images = _text_and_images(message.get("content"))
        turn: JSONDict = {"role": "system" if role == "developer" else role, "content": text}
        if images:
            turn["images"] = images
        if role == "assistant":
            calls = _assistant_calls(message, names)
            if calls:
                turn["tool_calls"] = calls
        elif role == "tool":
            name = names.get(str(message.get("tool_call_id")), message.get("name"))
            if isinstance(name, str):
                turn["tool_name"] = name
        out.append(turn)
    return out


# ---- back ---------------------------------------------------------------------


def from_ollama_chat(body: JSONDict, model: str) -> JSONDict:
    """An OpenAI chat.completion for an `/api/chat` response."""
    message = body.get("message")
    if not isinstance(message, dict):
        raise DecodeError("upstream answered 200 with a body that is not an Ollama chat "
                          "response (no `message` object)")
    # Stable ids: the same answer, streamed or not, replayed or live, gets the
    # same ids and body; its time stamp sets one answer apart from the next.
    answer = [body.get("model"), body.get("created_at"), message]
    digest = hashlib.sha256(_json.compact_bytes(answer)).hexdigest()
    calls = _openai_calls(message.get("tool_calls"), digest)
    content = message.get("content")
    reply: JSONDict = {"role": "assistant",
                       "content": content if isinstance(content, str) else ""}
    if calls:
        reply["tool_calls"] = calls
        if not reply["content"]:
            reply["content"] = None
    reason = body.get("done_reason")
    finish = "tool_calls" if calls else _FINISH.get(reason, "stop") \
        if isinstance(reason, str) else "stop"
    name = body.get("model")
    out: JSONDict = {"id": f"chatcmpl-ollama-{digest[:24]}", "object": "chat.completion",
                     "created": _created(body.get("created_at")),
                     "model": name if isinstance(name, str) and name else model,
                     "choices": [{"index": 0, "message": reply, "finish_reason": finish}]}
    usage = _usage(body)
    if usage is not None:
        out["usage"] = usage
    return out


def _openai_calls(raw: Any, digest: str) -> list[JSONDict]:
    if not isinstance(raw, list):
        return []
    calls: list[JSONDict] = []
    for call in raw[:MAX_STREAMED_CALLS]:
        fn = call.get("function") if isinstance(call, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
            continue
        arguments = fn.get("arguments")
        if not isinstance(arguments, str):
            arguments = _json.compact({} if arguments is None else arguments)
        given = call.get("id")
        fits = isinstance(given, str) and 0 < len(given) <= _MAX_ID_LEN
        call_id = given if fits else f"call_{digest[:12]}{len(calls):02d}"
        calls.append({"id": call_id, "type": "function",
                      "function": {"name": fn["name"], "arguments": arguments}})
    return calls


def _created(stamp: Any) -> int:
    """Seconds since the epoch of Ollama's RFC 3339 `created_at` (0 if unreadable).
    Ollama writes nanoseconds, which `datetime.fromisoformat` refuses."""
    match = _STAMP.fullmatch(stamp) if isinstance(stamp, str) else None
    if match is None:
        return 0
    zone = match[2] if match[2] and match[2] != "Z" else "+00:00"
    try:
        return int(datetime.fromisoformat(match[1] + zone).timestamp())
    except ValueError:
        return 0


def _usage(body: JSONDict) -> JSONDict | None:
    def count(key: str) -> int | None:
        value = body.get(key)
        return value if isinstance(value, int) and not isinstance(value, bool) \
            and value >= 0 else None

    prompt, completion = count("prompt_eval_count"), count("eval_count")
    if prompt is None and completion is None:
        return None
    prompt, completion = prompt or 0, completion or 0
    return {"prompt_tokens": prompt, "completion_tokens": completion,
            "total_tokens": prompt + completion}
