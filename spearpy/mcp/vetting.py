"""What makes a tool an MCP server lists unusable: its listing is untrusted.

A server can list anything the protocol lets through: an empty name, a name
of control characters, a description of megabytes, a schema that is not an
object or does not compile. Each such tool is left out, naming why, and the
server's other tools stay; nothing a listing holds may fail the send. (What
the protocol itself refuses, a description that is not a string or an
`inputSchema` that is not an object schema, fails the whole `tools/list` in
the SDK: that server is unavailable, the other sources go on.)
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from spearpy._term import one_line

# MCP's own bound on a tool name (2025-11-25: "SHOULD be between 1 and 128").
MAX_NAME_CHARS = 128
# Ample for a real tool's prose; a listing that spends more is spending the
# model's context (it goes out with every request) or probing for limits.
MAX_DESCRIPTION_CHARS = 8 * 1024
# The parameters schema as compact JSON. Real servers' largest are a few KiB.
MAX_SCHEMA_BYTES = 64 * 1024
# How much of a hostile name a warning quotes.
_SHOWN_NAME_CHARS = 64


def shown_name(name: str) -> str:
    """A listed name as a warning quotes it: cut, quoted, control characters
    escaped (repr escapes every character that is not printable)."""
    if len(name) > _SHOWN_NAME_CHARS:
        name = name[:_SHOWN_NAME_CHARS - 3] + "..."
    return repr(name)


def name_problem(name: Any) -> str | None:
    if not isinstance(name, str):
        return "its name is not a string"
    if not name:
        return "its name is empty"
    if len(name) > MAX_NAME_CHARS:
        return f"its name is {len(name)} characters long (more than {MAX_NAME_CHARS})"
    if not name.isprintable():
        return "its name holds control or invisible characters"
    return None


def description_problem(description: Any) -> str | None:
    if not isinstance(description, str):
        return "its description is not a string"
    if len(description) > MAX_DESCRIPTION_CHARS:
        return (f"its description is {len(description)} characters long "
                f"(more than {MAX_DESCRIPTION_CHARS})")
    return None


def schema_shape_problem(schema: Any) -> str | None:
    """What is wrong with a parameters schema before it is compiled (which
    `chat.registry.schema_problem` does)."""
    if not isinstance(schema, Mapping):
        return "its input schema is not a JSON object"
    if schema.get("type", "object") != "object":
        kind = one_line(str(schema["type"]), 40)
        return f"its input schema is not an object schema (type {kind!r})"
    try:
        size = len(json.dumps(schema, separators=(",", ":"), allow_nan=False).encode())
    except (TypeError, ValueError, RecursionError):
        return "its input schema is not plain JSON"
    if size > MAX_SCHEMA_BYTES:
        return f"its input schema is {size} bytes (more than {MAX_SCHEMA_BYTES})"
    return None
