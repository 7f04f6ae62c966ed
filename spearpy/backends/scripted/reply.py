"""The reply side of the scripted model: validated reply specs and what they render to.

A `ReplySpec` is one `reply` object of a script, checked once at load time.
`ReplySpec.render(request, index)` turns it into a `ScriptedReply`: status,
headers and an OpenAI-shaped body (or raw text, or a wire fault for the
server to act out). Rendering is a pure function of (spec, request, index) so
identical request sequences give byte-identical responses and recorded runs
replay exactly. Other provider dialects plug in here, as other renderers.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, TypeAlias

from spearpy import _json
from spearpy.errors import SpearpyError

JSONDict: TypeAlias = dict[str, Any]

# A fixed timestamp: a real clock would make bodies differ between runs.
CREATED = 1700000000
DEFAULT_MODEL = "scripted"
FAULTS = frozenset({"reset", "truncate", "garbage"})
# What "garbage" sends when the rule gives no body_text: looks like the start
# of a completion, so a client that only sniffs the first byte is caught out.
DEFAULT_GARBAGE = '{"id":"chatcmpl-garbage","choices":[<<upstream garbage, not JSON>>'

REPLY_KEYS = frozenset(
    {
        "content", "tool_calls", "finish_reason", "usage", "raw", "status", "error",
        "body_text", "headers", "delay_ms", "fault", "raw_arguments", "stream_delay_ms",
    }
)  # fmt: skip
_FRAMING_HEADERS = frozenset({"content-length", "transfer-encoding", "connection"})
TOOL_CALL_KEYS = frozenset({"id", "name", "arguments", "type", "raw_arguments"})

_TEMPLATE = re.compile(r"\{\{\s*(last_tool|last_user|model)\s*\}\}")

# OpenAI's error `type`/`code` for the statuses tests provoke most often.
_ERROR_KINDS: dict[int, tuple[str, str]] = {
    400: ("invalid_request_error", "invalid_request"),
    401: ("invalid_request_error", "invalid_api_key"),
    403: ("invalid_request_error", "forbidden"),
    404: ("invalid_request_error", "not_found"),
    405: ("invalid_request_error", "method_not_allowed"),
    413: ("invalid_request_error", "request_too_large"),
    429: ("requests", "rate_limit_exceeded"),
    500: ("server_error", "internal_error"),
    502: ("server_error", "bad_gateway"),
    503: ("server_error", "service_unavailable"),
}


class ScriptError(SpearpyError, ValueError):
    """A script (or a reply produced by a script callable) is invalid."""


dumps = _json.compact  # compact, the way OpenAI serialises tool-call arguments


def error_body(
    message: str, *, status: int, type_: str | None = None, code: str | None = None
) -> JSONDict:
    kind, default_code = _ERROR_KINDS.get(
        status, ("server_error" if status >= 500 else "invalid_request_error", f"http_{status}")
    )
    return {"error": {"message": message, "type": type_ or kind, "code": code or default_code}}


@dataclass(frozen=True, slots=True)
class ScriptedReply:
    """One answer, ready to be put on the wire (or inspected in-process)."""

    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    body: JSONDict | None = None  # a JSON object; None when body_text or a fault says otherwise
    body_text: str | None = None  # sent verbatim instead of `body`
    delay_ms: int = 0
    fault: str | None = None  # "reset" | "truncate" | "garbage"
    rule: str | None = None  # which rule answered, for debugging
    # A streamed answer (the request asked for `stream`): these Server-Sent
    # Events instead of `body`, `stream_delay_ms` apart.
    events: list[bytes] | None = None
    stream_delay_ms: int = 0

    def payload(self) -> bytes:
        if self.body_text is not None:
            return self.body_text.encode("utf-8")
        if self.body is None:
            return b""
        return dumps(self.body).encode("utf-8")

    def content_type(self) -> str:
        if self.events is not None:
            return "text/event-stream"
        # garbage still claims JSON: that is the hostile part.
        if self.body_text is not None and self.fault != "garbage":
            return "text/plain; charset=utf-8"
        return "application/json"


def failure(message: str, *, status: int = 500, code: str | None = None) -> ScriptedReply:
    return ScriptedReply(status=status, body=error_body(message, status=status, code=code))


# ---- request helpers -----------------------------------------------------------


def text_of(content: Any) -> str:
    """The text of a message's content: a string, or the text parts of a list."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str)
        )
    return ""


def messages_of(request: JSONDict) -> list[JSONDict]:
    msgs = request.get("messages")
    if not isinstance(msgs, list):
        return []
    return [m for m in msgs if isinstance(m, dict)]


def last_content(request: JSONDict, role: str) -> str:
    for msg in reversed(messages_of(request)):
        if msg.get("role") == role:
            return text_of(msg.get("content"))
    return ""


def request_model(request: JSONDict) -> str:
    model = request.get("model")
    return model if isinstance(model, str) else DEFAULT_MODEL


# ---- reply specs ---------------------------------------------------------------


def _fail(where: str, msg: str) -> ScriptError:
    return ScriptError(f"{where}: {msg}")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass(frozen=True, slots=True)
class ToolCallSpec:
    name: str
    arguments: Any  # dict or str
    id: str | None = None
    type: str = "function"
    raw_arguments: bool = False

    @classmethod
    def parse(cls, raw: Any, where: str, reply_raw_args: bool) -> ToolCallSpec:
        if not isinstance(raw, dict):
            raise _fail(where, f"must be an object, got {type(raw).__name__}")
        unknown = sorted(set(raw) - TOOL_CALL_KEYS)
        if unknown:
            raise _fail(where, f"unknown keys {unknown}; allowed: {sorted(TOOL_CALL_KEYS)}")
        name = raw.get("name")
        if not isinstance(name, str) or not name:
            raise _fail(where, "'name' must be a non-empty string")
        args = raw.get("arguments", {})
        if not isinstance(args, dict | str):
            raise _fail(where, f"'arguments' must be an object or a string, got {args!r}")
        call_id = raw.get("id")
        if call_id is not None and not isinstance(call_id, str):
            raise _fail(where, "'id' must be a string")
        kind = raw.get("type", "function")
        if not isinstance(kind, str):
            raise _fail(where, "'type' must be a string")
        keep = raw.get("raw_arguments", reply_raw_args)
        if not isinstance(keep, bool):
            raise _fail(where, "'raw_arguments' must be true or false")
        return cls(name=name, arguments=args, id=call_id, type=kind, raw_arguments=keep)


def _opt(raw: JSONDict, key: str, check: type, where: str, what: str) -> Any:
    """raw[key] if it is absent, null or of type `check`; else a ScriptError."""
    value = raw.get(key)
    if value is not None and not isinstance(value, check):
        raise _fail(where, f"'{key}' must be {what}, got {value!r}")
    return value


@dataclass(frozen=True, slots=True)
class ReplySpec:
    """One validated `reply` object."""

    content: str | None = None
    has_content: bool = False  # "content": null is different from no content key
    tool_calls: tuple[ToolCallSpec, ...] = ()
    finish_reason: str | None = None
    has_finish_reason: bool = False
    usage: JSONDict | None = None
    has_usage: bool = False
    raw: JSONDict | None = None
    status: int = 200
    error: JSONDict | None = None  # {"message", "type"?, "code"?}
    body_text: str | None = None
    headers: dict[str, str] = field(default_factory=dict)
    delay_ms: int = 0
    fault: str | None = None
    stream_delay_ms: int = 0

    @classmethod
    def parse(cls, raw: Any, where: str) -> ReplySpec:
        if not isinstance(raw, dict):
            raise _fail(where, f"reply must be an object, got {type(raw).__name__}")
        unknown = sorted(set(raw) - REPLY_KEYS)
        if unknown:
            raise _fail(where, f"unknown reply keys {unknown}; allowed: {sorted(REPLY_KEYS)}")
        if "content" in raw and raw["content"] is not None and not isinstance(raw["content"], str):
            raise _fail(where, "'content' must be a string or null")
        raw_args = raw.get("raw_arguments", False)
        if not isinstance(raw_args, bool):
            raise _fail(where, "'raw_arguments' must be true or false")
        calls_raw = raw.get("tool_calls", [])
        if not isinstance(calls_raw, list):
            raise _fail(where, "'tool_calls' must be a list")
        calls = tuple(
            ToolCallSpec.parse(c, f"{where}: tool_calls[{i}]", raw_args)
            for i, c in enumerate(calls_raw)
        )
        _opt(raw, "finish_reason", str, where, "a string or null")
        _opt(raw, "usage", dict, where, "an object or null")
        status = raw.get("status", 200)
        if not _is_int(status) or not 200 <= status <= 599:
            raise _fail(where, f"'status' must be an int in 200..599, got {status!r}")
        delay = raw.get("delay_ms", 0)
        if not _is_int(delay) or delay < 0:
            raise _fail(where, f"'delay_ms' must be a non-negative int, got {delay!r}")
        pace = raw.get("stream_delay_ms", 0)
        if not _is_int(pace) or pace < 0:
            raise _fail(where, f"'stream_delay_ms' must be a non-negative int, got {pace!r}")
        fault = raw.get("fault")
        if fault is not None and fault not in FAULTS:
            raise _fail(where, f"'fault' must be one of {sorted(FAULTS)}, got {fault!r}")
        headers = raw.get("headers", {})
        if not isinstance(headers, dict) or not all(
            isinstance(k, str) and isinstance(v, str | int) and not isinstance(v, bool)
            for k, v in headers.items()
        ):
            raise _fail(where, "'headers' must map header names to strings")
        framing = sorted({k.lower() for k in headers} & _FRAMING_HEADERS)
        if framing:
            # A wrong length would desync the keep-alive connection for later requests.
            raise _fail(where, f'\'headers\' may not set {framing}; use "fault": "truncate"')
        body_text = _opt(raw, "body_text", str, where, "a string")
        return cls(
            content=raw.get("content"),
            has_content="content" in raw,
            tool_calls=calls,
            finish_reason=raw.get("finish_reason"),
            has_finish_reason="finish_reason" in raw,
            usage=raw.get("usage"),
            has_usage="usage" in raw,
            raw=_opt(raw, "raw", dict, where, "an object (use body_text for anything else)"),
            status=status,
            error=_parse_error(raw.get("error"), where),
            body_text=body_text,
            headers={k: str(v) for k, v in headers.items()},
            delay_ms=delay,
            fault=fault,
            stream_delay_ms=pace,
        )

    def render(self, request: JSONDict, index: int, rule: str | None = None) -> ScriptedReply:
        """Build the answer to `request`, the `index`-th request the script answered."""
        common: JSONDict = {
            "status": self.status, "headers": dict(self.headers), "delay_ms": self.delay_ms,
            "fault": self.fault, "rule": rule, "stream_delay_ms": self.stream_delay_ms,
        }  # fmt: skip
        if self.body_text is not None:
            return ScriptedReply(body_text=self.body_text, **common)
        if self.fault == "garbage":
            return ScriptedReply(body_text=DEFAULT_GARBAGE, **common)
        if self.raw is not None:
            return ScriptedReply(body=self.raw, **common)
        if self.error is not None:
            err = self.error
            body = error_body(
                err["message"], status=self.status, type_=err.get("type"), code=err.get("code")
            )
            return ScriptedReply(body=body, **common)
        if self.status != 200:
            body = error_body(f"scripted HTTP {self.status}", status=self.status)
            return ScriptedReply(body=body, **common)
        return ScriptedReply(body=self._completion(request, index), **common)

    def _completion(self, request: JSONDict, index: int) -> JSONDict:
        values = {
            "last_tool": last_content(request, "tool"),
            "last_user": last_content(request, "user"),
            "model": request_model(request),
        }
        calls = [_render_call(c, values, index, i) for i, c in enumerate(self.tool_calls)]
        if self.has_content:
            content = None if self.content is None else _fill(self.content, values)
        else:
            content = None if calls else ""
        message: JSONDict = {"role": "assistant", "content": content}
        if calls:
            message["tool_calls"] = calls
        natural = "tool_calls" if calls else "stop"
        finish = self.finish_reason if self.has_finish_reason else natural
        body: JSONDict = {
            "id": f"chatcmpl-scripted-{index}",
            "object": "chat.completion",
            "created": CREATED,
            "model": values["model"],
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        }
        if not self.has_usage:
            body["usage"] = default_usage(request, content, calls)
        elif self.usage is not None:  # "usage": null leaves it out, like some providers
            body["usage"] = self.usage
        return body


def _parse_error(raw: Any, where: str) -> JSONDict | None:
    if raw is None:
        return None
    if isinstance(raw, str):
        return {"message": raw}
    if isinstance(raw, dict) and isinstance(raw.get("message"), str):
        for key in ("type", "code"):
            if raw.get(key) is not None and not isinstance(raw[key], str):
                raise _fail(where, f"'error.{key}' must be a string")
        return raw
    raise _fail(where, "'error' must be a message string or an object with a 'message' string")


def _fill(text: str, values: dict[str, str]) -> str:
    # Unknown {{placeholders}} are left alone: guests may legitimately send braces.
    return _TEMPLATE.sub(lambda m: values[m.group(1)], text)


def _fill_all(value: Any, values: dict[str, str]) -> Any:
    if isinstance(value, str):
        return _fill(value, values)
    if isinstance(value, dict):
        return {k: _fill_all(v, values) for k, v in value.items()}
    if isinstance(value, list):
        return [_fill_all(v, values) for v in value]
    return value


def _render_call(spec: ToolCallSpec, values: dict[str, str], index: int, i: int) -> JSONDict:
    args = _fill_all(spec.arguments, values)
    if not spec.raw_arguments and not isinstance(args, str):
        args = dumps(args)
    return {
        "id": spec.id if spec.id is not None else f"call_{index}_{i}",
        "type": spec.type,
        "function": {"name": spec.name, "arguments": args},
    }


def default_usage(request: JSONDict, content: str | None, calls: list[JSONDict]) -> JSONDict:
    """Deterministic token counts: about four characters a token, like tiktoken on English."""
    prompt = sum(len(text_of(m.get("content"))) for m in messages_of(request)) // 4
    chars = len(content or "")
    for call in calls:
        args = call["function"]["arguments"]
        chars += len(args if isinstance(args, str) else dumps(args))
    completion = max(1, chars // 4)
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }
