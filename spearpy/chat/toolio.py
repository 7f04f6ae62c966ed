"""A tool call's way in and out: the arguments checked before the call runs,
the output checked before the model reads it.

Pure functions of a call, its tool and the send's limits. The ToolLoop
(chat/loop.py) decides what a problem does to the send: an error answer for
the model, or the end of a strict send.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from spearpy import _json, abi
from spearpy.chat.protocol import ToolOutcome
from spearpy.chat.session import tool_error_content

if TYPE_CHECKING:
    from spearpy.chat.registry import Tool

_MAX_NAME_IN_MESSAGE = 80


def unknown_tool(name: str) -> str:
    """The answer's message for a call of a name no tool is registered under."""
    return f"no tool named {name[:_MAX_NAME_IN_MESSAGE]!r} is registered"


def check_arguments(tool: Tool, text: str, validate: bool) -> tuple[Any, str | None]:
    """(the parsed arguments, why they cannot be passed to `tool` or None):
    valid JSON, no NaN or infinities, and with `validate` an object valid
    for the tool's schema. Every tool call passes here."""
    try:
        parsed = _json.loads(text, allow_nan=False)
    except ValueError as exc:
        return None, f"arguments are not valid JSON: {exc}"
    if not validate:
        return parsed, None
    if not isinstance(parsed, dict):
        return parsed, "arguments must be a JSON object"
    check = tool.check
    if check is not None and check(parsed):
        return parsed, None
    # jsonschema decides (and explains) whatever the fast path cannot pass.
    return parsed, tool.validate(parsed)


def cache_key(name: str, parsed: Any) -> tuple[str, str]:
    """The result cache's key: the same call however the model spaced or ordered it."""
    return name, json.dumps(parsed, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def output_content(outcome: ToolOutcome, max_bytes: int) -> tuple[str, bool]:
    """(the tool message's content, whether it is the tool's own output):
    a failure or an output that is not UTF-8 or over `max_bytes` becomes an
    error for the model. Only the tool's own output may be cached."""
    output = outcome.output
    if not outcome.ok:
        return tool_error_content(outcome.error_code or abi.TOOL_EXEC_FAILED,
                                  outcome.error_message or ""), False
    if output.isascii() and len(output) <= max_bytes:
        return output, True  # ASCII is UTF-8, one byte a character: nothing to encode
    try:
        size = len(output.encode("utf-8"))
    except UnicodeEncodeError:
        return tool_error_content(abi.TOOL_EXEC_FAILED, "tool output is not valid UTF-8"), False
    if size > max_bytes:
        return tool_error_content(
            abi.TOOL_OUTPUT_TOO_LARGE,
            f"tool output is {size} bytes, over max_tool_output_bytes ({max_bytes})"), False
    return output, True
