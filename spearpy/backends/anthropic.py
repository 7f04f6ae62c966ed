"""The Anthropic Messages API backend, mapped both ways to the OpenAI shape.

The session holds OpenAI-style messages and guests always read an OpenAI-style
chat completion, whichever backend answered. Going out: system and developer
messages become the top-level `system`; assistant tool_calls become tool_use
blocks; tool messages become tool_result blocks (is_error when the content is
spearpy's `{"error": {...}}`), placed first in the next user turn as the API
requires; consecutive turns of one role are merged. Coming back: text blocks
become `content`, tool_use blocks `tool_calls`, stop_reason `finish_reason`,
and usage is counted the OpenAI way (prompt tokens include cached input).
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

from spearpy import _json
from spearpy.backends.base import CompletionRequest
from spearpy.backends.httpbackend import DecodeError, HTTPBackend
from spearpy.backends.sse import AnthropicStream, DeltaSink
from spearpy.chat.protocol import JSONDict
from spearpy.secret_env import ANTHROPIC_KEY_ENV

ANTHROPIC_VERSION = "2023-06-01"
# The Messages API requires max_tokens; 4096 fits every current model's limit.
DEFAULT_MAX_TOKENS = 4096

_STOP_REASONS = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "pause_turn": "stop",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "tool_use": "tool_calls",
    "refusal": "content_filter",
}
# OpenAI parameters with an Anthropic counterpart of another name or shape are
# mapped; these have none and would be a 400, so they are dropped.
_DROPPED = frozenset({
    "seed", "response_format", "frequency_penalty", "presence_penalty", "logprobs",
    "top_logprobs", "logit_bias", "user", "store", "max_completion_tokens",
    "parallel_tool_calls", "tool_choice", "stop", "max_tokens",
})  # fmt: skip
_TOOL_ID = re.compile(r"^[a-zA-Z0-9_-]{1,64}\Z")


class AnthropicBackend(HTTPBackend):
    kind = "anthropic"
    path = "/messages"

    default_key_env = ANTHROPIC_KEY_ENV

    def __init__(
        self,
        *,
        base_url: str = "https://api.anthropic.com/v1",
        max_tokens: int = DEFAULT_MAX_TOKENS,
        anthropic_version: str = ANTHROPIC_VERSION,
        **options: Any,
    ) -> None:
        """`options` are HTTPBackend's (name, api_key_env, default_model, ...)."""
        self.max_tokens = max_tokens
        self.anthropic_version = anthropic_version
        super().__init__(base_url=base_url, **options)
        self._headers["anthropic-version"] = anthropic_version

    def auth_headers(self, key: str) -> dict[str, str]:
        return {"x-api-key": key}

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "max_tokens": self.max_tokens,
                "anthropic_version": self.anthropic_version}

    # ---- out -------------------------------------------------------------

    def encode(self, request: CompletionRequest) -> JSONDict:
        system, messages = to_anthropic_messages(request.messages)
        params = request.params
        body: JSONDict = {"model": request.model, "max_tokens": _max_tokens(params,
                                                                            self.max_tokens)}
        if system:
            body["system"] = system
        body["messages"] = messages
        if request.tools:
            body["tools"] = [_tool(t) for t in request.tools]
            choice = _tool_choice(params.get("tool_choice"), params.get("parallel_tool_calls"))
            if choice is not None:
                body["tool_choice"] = choice
        stop = params.get("stop")
        if isinstance(stop, str):
            body["stop_sequences"] = [stop]
        elif isinstance(stop, list):
            body["stop_sequences"] = stop
        for key, value in params.items():
            if key not in _DROPPED:
                body.setdefault(key, value)
        if request.stream:
            body["stream"] = True
        return body

    def stream_assembler(self, on_delta: DeltaSink | None) -> AnthropicStream:
        return AnthropicStream(on_delta)

    # ---- back ------------------------------------------------------------

    def decode(self, request: CompletionRequest, body: JSONDict) -> JSONDict:
        return from_anthropic_message(body)


def _max_tokens(params: dict[str, Any], default: int) -> int:
    for key in ("max_tokens", "max_completion_tokens"):
        value = params.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return default


def _tool(spec: JSONDict) -> JSONDict:
    inner = spec.get("function")
    fn: JSONDict = inner if isinstance(inner, dict) else spec
    tool: JSONDict = {"name": fn.get("name")}
    if isinstance(fn.get("description"), str):
        tool["description"] = fn["description"]
    params = fn.get("parameters")
    tool["input_schema"] = params if isinstance(params, dict) else {"type": "object",
                                                                    "properties": {}}
    return tool


def _tool_choice(choice: Any, parallel: Any) -> JSONDict | None:
    out: JSONDict | None
    if choice is None or choice == "auto":
        out = {"type": "auto"} if parallel is False else None
    elif choice == "required":
        out = {"type": "any"}
    elif choice == "none":
        return {"type": "none"}
    elif isinstance(choice, dict) and isinstance(choice.get("function"), dict):
        out = {"type": "tool", "name": choice["function"].get("name")}
    else:
        return None
    if out is not None and parallel is False:
        out["disable_parallel_tool_use"] = True
    return out


def tool_use_id(call_id: Any) -> str:
    """Anthropic accepts ids matching ^[a-zA-Z0-9_-]+$; other servers' ids may not."""
    text = call_id if isinstance(call_id, str) else str(call_id)
    if _TOOL_ID.match(text):
        return text
    digest = hashlib.sha256(text.encode()).hexdigest()[:12]
    return (re.sub(r"[^a-zA-Z0-9_-]", "_", text)[:40] + "_" + digest).lstrip("_") or digest


def _is_error_content(content: str) -> bool:
    try:
        value = _json.loads(content)
    except ValueError:
        return False
    return (isinstance(value, dict) and set(value) == {"error"}
            and isinstance(value["error"], dict) and "code" in value["error"])


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content
                       if isinstance(p, dict) and isinstance(p.get("text"), str))
    return "" if content is None else json.dumps(content, separators=(",", ":"))


def _input(arguments: Any) -> Any:
    if isinstance(arguments, dict):
        return arguments
    try:
        value = _json.loads(arguments) if isinstance(arguments, str) and arguments.strip() else {}
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _blocks(message: JSONDict) -> tuple[str, list[JSONDict]]:
    role = message.get("role")
    if role == "tool":
        content = _text(message.get("content"))
        block: JSONDict = {"type": "tool_result",
                           "tool_use_id": tool_use_id(message.get("tool_call_id", "")),
                           "content": content}
        if _is_error_content(content):
            block["is_error"] = True
        return "user", [block]
    text = _text(message.get("content"))
    blocks: list[JSONDict] = [{"type": "text", "text": text}] if text else []
    if role == "assistant":
        for call in message.get("tool_calls") or []:
            if not isinstance(call, dict):
                continue
            inner = call.get("function")
            fn: JSONDict = inner if isinstance(inner, dict) else call
            blocks.append({"type": "tool_use", "id": tool_use_id(call.get("id", "")),
                           "name": fn.get("name"), "input": _input(fn.get("arguments"))})
        return "assistant", blocks
    return "user", blocks


def to_anthropic_messages(messages: list[JSONDict]) -> tuple[str, list[JSONDict]]:
    """(system text, Messages API turns) for an OpenAI-style history."""
    system: list[str] = []
    turns: list[JSONDict] = []
    for message in messages:
        if message.get("role") in ("system", "developer"):
            text = _text(message.get("content"))
            if text:
                system.append(text)
            continue
        role, blocks = _blocks(message)
        if not blocks:
            continue  # the API refuses empty text blocks and empty turns
        if turns and turns[-1]["role"] == role:
            turns[-1]["content"].extend(blocks)
        else:
            turns.append({"role": role, "content": blocks})
    for turn in turns:
        # tool_result blocks must open their user turn, before any text.
        if turn["role"] == "user":
            turn["content"].sort(key=lambda b: b.get("type") != "tool_result")
    return "\n\n".join(system), turns


def from_anthropic_message(body: JSONDict) -> JSONDict:
    """An OpenAI chat.completion for a Messages API response."""
    content = body.get("content")
    if body.get("type") != "message" or not isinstance(content, list):
        raise DecodeError("upstream answered 200 with a body that is not an Anthropic message")
    texts: list[str] = []
    calls: list[JSONDict] = []
    for block in content:
        if not isinstance(block, dict):
            continue
        if block.get("type") == "text" and isinstance(block.get("text"), str):
            texts.append(block["text"])
        elif block.get("type") == "tool_use":
            calls.append({"id": block.get("id"), "type": "function",
                          "function": {"name": block.get("name"), "arguments": json.dumps(
                              block.get("input", {}), separators=(",", ":"),
                              ensure_ascii=False)}})
    message: JSONDict = {"role": "assistant", "content": "".join(texts) if texts else None}
    if calls:
        message["tool_calls"] = calls
    elif message["content"] is None:
        message["content"] = ""
    stop = body.get("stop_reason")
    finish = _STOP_REASONS.get(stop, "stop") if isinstance(stop, str) else None
    out: JSONDict = {"id": body.get("id"), "object": "chat.completion", "model": body.get("model"),
                     "choices": [{"index": 0, "message": message, "finish_reason": finish}]}
    usage = body.get("usage")
    if isinstance(usage, dict):
        out["usage"] = _usage(usage)
    return out


def _usage(usage: JSONDict) -> JSONDict:
    def count(key: str) -> int:
        value = usage.get(key)
        return value if isinstance(value, int) and not isinstance(value, bool) else 0

    cached = count("cache_read_input_tokens")
    prompt = count("input_tokens") + count("cache_creation_input_tokens") + cached
    completion = count("output_tokens")
    out: JSONDict = {"prompt_tokens": prompt, "completion_tokens": completion,
                     "total_tokens": prompt + completion}
    if cached:
        out["prompt_tokens_details"] = {"cached_tokens": cached}
    return out
