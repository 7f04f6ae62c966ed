"""Turning an MCP tool result (or a failure) into a `role=tool` content string.

Works on the wire form of a `CallToolResult` (a dict, camelCase keys), so it
is testable with plain data and holds no SDK type. Every failure becomes
SPEAR's shape `{"error":{"code":...,"message":...}}`, with its own code, so
the model can read what happened and the send goes on.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from spearpy import _json

MCP_TOOL_FAILED = "mcp_tool_failed"  # the tool ran and said isError (SPEAR's code)
MCP_TIMEOUT = "mcp_timeout"
MCP_SERVER_UNAVAILABLE = "mcp_server_unavailable"  # cannot start, crashed, restart backoff
MCP_PROTOCOL_ERROR = "mcp_protocol_error"  # malformed or schema-violating reply
MCP_DENIED = "mcp_denied"  # refused by policy (allowed_tools, task or session lists, approval)
MCP_UNKNOWN_SERVER = "mcp_unknown_server"
MCP_UNKNOWN_TOOL = "mcp_unknown_tool"
MCP_OUTPUT_TOO_LARGE = "mcp_output_too_large"  # a reply too big to even read
MCP_CANCELLED = "mcp_cancelled"
MCP_INVALID_ARGUMENTS = "mcp_invalid_arguments"
ERROR_CODES = (MCP_TOOL_FAILED, MCP_TIMEOUT, MCP_SERVER_UNAVAILABLE, MCP_PROTOCOL_ERROR,
               MCP_DENIED, MCP_UNKNOWN_SERVER, MCP_UNKNOWN_TOOL, MCP_OUTPUT_TOO_LARGE,
               MCP_CANCELLED, MCP_INVALID_ARGUMENTS)

MARKER = "\n[truncated by spearpy: {shown} of {total} bytes shown]"
# Room for the marker with the longest numbers it can hold (two 20-digit counts).
_MARKER_ROOM = len(MARKER.format(shown="9" * 20, total="9" * 20).encode())


compact_json = _json.compact


def cut_utf8(text: str, max_bytes: int) -> str:
    """The longest prefix of `text` of at most `max_bytes` UTF-8 bytes."""
    raw = text.encode("utf-8")
    if len(raw) <= max_bytes:
        return text
    # Dropping the bytes of a split character: errors="ignore" on a prefix
    # only ever drops that trailing partial sequence.
    return raw[:max(max_bytes, 0)].decode("utf-8", errors="ignore")


def truncate(text: str, max_bytes: int) -> tuple[str, bool]:
    """(text, False) if it fits in `max_bytes`, else a prefix cut on a
    character boundary plus a visible marker, the whole within `max_bytes`."""
    size = len(text.encode("utf-8"))
    if size <= max_bytes:
        return text, False
    if max_bytes <= _MARKER_ROOM:
        return cut_utf8(text, max_bytes), True
    head = cut_utf8(text, max_bytes - _MARKER_ROOM)
    shown = len(head.encode("utf-8"))
    return head + MARKER.format(shown=shown, total=size), True


def error_content(code: str, message: str, max_bytes: int | None = None) -> str:
    """`{"error":{"code":code,"message":message}}`; the message is cut (with
    the marker) so the whole stays within `max_bytes`."""
    body = compact_json({"error": {"code": code, "message": message}})
    if max_bytes is None or len(body.encode()) <= max_bytes:
        return body
    overhead = len(compact_json({"error": {"code": code, "message": ""}}).encode())
    # JSON escaping can grow the message (quotes, control characters), so
    # shrink until it fits rather than trusting one estimate.
    budget = max_bytes - overhead
    while budget > 0:
        cut, _ = truncate(message, budget)
        body = compact_json({"error": {"code": code, "message": cut}})
        if len(body.encode()) <= max_bytes:
            return body
        budget -= max(len(body.encode()) - max_bytes, 1)
    return compact_json({"error": {"code": code, "message": ""}})


def _b64_size(data: Any) -> int:
    if not isinstance(data, str):
        return 0
    return len(data) * 3 // 4 - data[-2:].count("=")


def _describe(block: Mapping[str, Any]) -> str:
    """A one-line summary of a non-text block: what it is, never silently dropped."""
    kind = block.get("type")
    if kind in ("image", "audio"):
        mime = block.get("mimeType") or "unknown type"
        return f"[{kind}: {mime}, {_b64_size(block.get('data'))} bytes]"
    if kind == "resource_link":
        extras = [str(block[k]) for k in ("name", "mimeType") if block.get(k)]
        if isinstance(block.get("size"), int):
            extras.append(f"{block['size']} bytes")
        detail = f" ({', '.join(extras)})" if extras else ""
        return f"[resource link: {block.get('uri')}{detail}]"
    if kind == "resource":
        resource = block.get("resource") or {}
        mime = resource.get("mimeType") or "unknown type"
        if isinstance(resource.get("text"), str):
            text = resource["text"]
            return f"[resource: {resource.get('uri')}, {mime}, {len(text.encode())} bytes]\n{text}"
        return f"[resource: {resource.get('uri')}, {mime}, {_b64_size(resource.get('blob'))} bytes]"
    return f"[{kind or 'unknown'} content]"


def render_content(blocks: Sequence[Mapping[str, Any]], structured: Any = None) -> str:
    """Text blocks joined by newlines, other blocks summarised in place.

    `structuredContent` is used as compact JSON when there is no text, or when
    the text is just that value serialised (servers SHOULD send both, and the
    compact form costs fewer tokens); otherwise the text wins, since it is
    what the server wrote for a model to read."""
    texts = [b.get("text", "") for b in blocks if b.get("type") == "text"]
    others = [_describe(b) for b in blocks if b.get("type") != "text"]
    if structured is not None:
        joined = "\n".join(texts)
        duplicate = False
        if texts:
            try:
                duplicate = json.loads(joined) == structured
            except ValueError:
                duplicate = False
        if not texts or duplicate:
            return "\n".join([compact_json(structured), *others])
    parts: list[str] = []
    for block in blocks:
        parts.append(block.get("text", "") if block.get("type") == "text" else _describe(block))
    return "\n".join(parts)


@dataclass(frozen=True)
class Rendered:
    content: str
    is_error: bool
    code: str | None
    truncated: bool


def render_result(result: Mapping[str, Any], max_bytes: int) -> Rendered:
    """The tool message for a CallToolResult in wire form."""
    blocks = result.get("content")
    blocks = [b for b in blocks if isinstance(b, Mapping)] if isinstance(blocks, list) else []
    text = render_content(blocks, result.get("structuredContent"))
    if result.get("isError"):
        message = text or "the tool reported an error"
        body = error_content(MCP_TOOL_FAILED, message, max_bytes)
        whole = len(error_content(MCP_TOOL_FAILED, message).encode())
        return Rendered(body, True, MCP_TOOL_FAILED, whole > max_bytes)
    content, cut = truncate(text, max_bytes)
    return Rendered(content, False, None, cut)
