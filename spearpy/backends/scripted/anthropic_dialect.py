"""The scripted server speaking the Anthropic Messages API (POST /v1/messages).

The request is validated the way the API validates it (x-api-key and
anthropic-version headers, max_tokens, roles, non-empty text blocks, every
tool_use answered by a tool_result at the start of the next user turn, no
orphan tool_result), then shown to the script in OpenAI form, so the same
script drives every dialect. The script's answer is rendered as a Messages
API response (or an Anthropic error body).

This is written independently of spearpy.backends.anthropic on purpose: a
shared misunderstanding of the API would otherwise cancel out in the tests.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from spearpy import _json
from spearpy.backends.scripted.dialects import Dialect, Respond, derived_id, plain_error
from spearpy.backends.scripted.reply import JSONDict, ScriptedReply, dumps
from spearpy.backends.scripted.streamed import anthropic_events

MESSAGES_PATH = "/v1/messages"
_ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error",
                403: "permission_error", 404: "not_found_error", 413: "request_too_large",
                429: "rate_limit_error", 500: "api_error", 529: "overloaded_error"}
_STOP = {"tool_calls": "tool_use", "stop": "end_turn", "length": "max_tokens",
         "content_filter": "refusal"}


def anthropic_error(status: int, message: str) -> ScriptedReply:
    kind = _ERROR_TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")
    return plain_error(status, {"type": "error", "error": {"type": kind, "message": message}})


class AnthropicDialect(Dialect):
    name = "anthropic"

    def unauthorized(self, headers: Mapping[str, str], api_key: str) -> ScriptedReply | None:
        if headers.get("x-api-key") == api_key:
            return None
        return anthropic_error(401, "invalid x-api-key")

    def answer(self, method: str, path: str, headers: Mapping[str, str],
               body: JSONDict | None, respond: Respond) -> ScriptedReply | None:
        if path != MESSAGES_PATH:
            return anthropic_error(404, f"Not found: {method} {path}")
        if method != "POST":
            return anthropic_error(405, f"Method {method} not allowed")
        if not headers.get("anthropic-version"):
            return anthropic_error(400, "anthropic-version: header is required")
        if not isinstance(body, dict):
            return anthropic_error(400, "the request body must be a JSON object")
        problem = validate(body)
        if problem is not None:
            return anthropic_error(400, problem)
        reply = respond(to_openai_request(body))
        if reply.body is None:
            return reply  # body_text and wire faults are the same in every dialect
        if reply.status != 200:
            err = reply.body.get("error")
            message = err.get("message") if isinstance(err, dict) else None
            return ScriptedReply(status=reply.status, headers=reply.headers,
                                 delay_ms=reply.delay_ms, rule=reply.rule,
                                 body=anthropic_error(reply.status, str(message)).body)
        message = to_anthropic_response(reply.body)
        return ScriptedReply(status=200, headers=reply.headers, delay_ms=reply.delay_ms,
                             rule=reply.rule, body=message,
                             events=anthropic_events(message) if body.get("stream") is True
                             else None, stream_delay_ms=reply.stream_delay_ms)


# ---- validation ------------------------------------------------------------------


def _blocks(content: Any) -> list[Any]:
    return [{"type": "text", "text": content}] if isinstance(content, str) else content


def validate(body: JSONDict) -> str | None:
    if not isinstance(body.get("model"), str):
        return "model: Field required"
    max_tokens = body.get("max_tokens")
    if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
        return "max_tokens: Field required"
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return "messages: at least one message is required"
    for tool in body.get("tools") or []:
        if not isinstance(tool, dict) or not isinstance(tool.get("name"), str) or \
                not isinstance(tool.get("input_schema"), dict):
            return "tools: each tool needs a name and an input_schema object"
    pending: list[str] = []  # tool_use ids of the previous assistant turn
    for i, msg in enumerate(messages):
        if not isinstance(msg, dict) or msg.get("role") not in ("user", "assistant"):
            role = msg.get("role") if isinstance(msg, dict) else None
            return (f"messages.{i}: Unexpected role {json.dumps(role)}. The Messages API accepts "
                    "a top-level `system` parameter, not \"system\" as an input message role.")
        blocks = _blocks(msg.get("content"))
        if not isinstance(blocks, list) or not blocks:
            return f"messages.{i}: content must be a non-empty string or list of blocks"
        for block in blocks:
            if not isinstance(block, dict) or not isinstance(block.get("type"), str):
                return f"messages.{i}: every content block needs a type"
            if block["type"] == "text" and not block.get("text"):
                return f"messages.{i}: text content blocks must be non-empty"
        problem = _check_pairing(i, msg["role"], blocks, pending)
        if problem is not None:
            return problem
        pending = [b.get("id") for b in blocks if b["type"] == "tool_use"]
    return None


def _check_pairing(i: int, role: str, blocks: list[JSONDict], pending: list[str]) -> str | None:
    results = [b.get("tool_use_id") for b in blocks if b["type"] == "tool_result"]
    if role == "assistant" and results:
        return f"messages.{i}: tool_result blocks are only allowed in user messages"
    if pending:
        missing = [p for p in pending if p not in results]
        if role != "user" or missing:
            return (f"messages.{i}: `tool_use` ids were found without `tool_result` blocks "
                    f"immediately after: {', '.join(missing or pending)}. Each `tool_use` block "
                    "must have a corresponding `tool_result` block in the next message.")
        leading = 0
        while leading < len(blocks) and blocks[leading]["type"] == "tool_result":
            leading += 1
        if leading != len(results):
            return (f"messages.{i}: tool_result blocks must come first in the user message, "
                    "before any other content")
    orphans = [r for r in results if r not in pending]
    if orphans:
        return (f"messages.{i}: unexpected `tool_use_id` found in `tool_result` blocks: "
                f"{orphans[0]}. Each `tool_result` block must have a corresponding `tool_use` "
                "block in the previous message.")
    return None


# ---- the script's view, and back -----------------------------------------------------


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(b.get("text", "") for b in content if isinstance(b, dict))
    return ""


def to_openai_request(body: JSONDict) -> JSONDict:
    messages: list[JSONDict] = []
    system = body.get("system")
    if system:
        messages.append({"role": "system", "content": _text_of(system)})
    for msg in body["messages"]:
        blocks = _blocks(msg["content"])
        if msg["role"] == "assistant":
            calls = [{"id": b["id"], "type": "function", "function": {
                "name": b["name"], "arguments": dumps(b.get("input", {}))}}
                for b in blocks if b["type"] == "tool_use"]
            out: JSONDict = {"role": "assistant", "content": _text_of(
                [b for b in blocks if b["type"] == "text"]) or None}
            if calls:
                out["tool_calls"] = calls
            messages.append(out)
            continue
        for block in blocks:
            if block["type"] == "tool_result":
                messages.append({"role": "tool", "tool_call_id": block["tool_use_id"],
                                 "content": _text_of(block.get("content"))})
        text = _text_of([b for b in blocks if b["type"] == "text"])
        if text:
            messages.append({"role": "user", "content": text})
    request: JSONDict = {"model": body["model"], "messages": messages,
                         "max_tokens": body["max_tokens"]}
    if body.get("tools"):
        request["tools"] = [{"type": "function", "function": {
            "name": t["name"], "description": t.get("description", ""),
            "parameters": t["input_schema"]}} for t in body["tools"]]
    return request


def _input(arguments: Any) -> Any:
    if isinstance(arguments, dict):
        return arguments
    try:
        value = _json.loads(arguments)
    except (TypeError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def to_anthropic_response(completion: JSONDict) -> JSONDict:
    choice = completion["choices"][0]
    message = choice.get("message") or {}
    content: list[JSONDict] = []
    if message.get("content"):
        content.append({"type": "text", "text": message["content"]})
    for call in message.get("tool_calls") or []:
        fn = call.get("function") or {}
        content.append({"type": "tool_use",
                        "id": "toolu_" + derived_id(str(call.get("id")), 24),
                        "name": fn.get("name"), "input": _input(fn.get("arguments"))})
    usage = completion.get("usage") or {}
    return {
        "id": "msg_" + derived_id(str(completion.get("id")), 24),
        "type": "message", "role": "assistant", "model": completion.get("model"),
        "content": content,
        "stop_reason": _STOP.get(choice.get("finish_reason"), "end_turn"),
        "stop_sequence": None,
        "usage": {"input_tokens": usage.get("prompt_tokens", 0),
                  "output_tokens": usage.get("completion_tokens", 0)},
    }  # fmt: skip
