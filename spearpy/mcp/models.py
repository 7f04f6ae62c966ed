"""The MCP layer's result types, SDK-free: what the loop's tool source sees."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from spearpy.errors import SpearpyError
from spearpy.mcp.naming import spear_tool_name


class McpError(SpearpyError):
    """A failure with one of the `results` codes, for the model to read."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(frozen=True)
class ToolSpec:
    """One tool a server offers, SDK-free."""

    server_id: str
    name: str
    description: str
    input_schema: Mapping[str, Any]
    output_schema: Mapping[str, Any] | None = None
    title: str | None = None
    annotations: Mapping[str, Any] | None = None

    @property
    def spear_name(self) -> str:
        return spear_tool_name(self.server_id, self.name)

    def to_openai(self, name: str | None = None) -> dict[str, Any]:
        """A chat-completions `tools` entry, under SPEAR's name unless `name` is given."""
        return {"type": "function", "function": {
            "name": name or self.spear_name, "description": self.description,
            "parameters": dict(self.input_schema) or {"type": "object"}}}


@dataclass(slots=True)
class Offered:
    """The MCP tools one send offers (McpManager.offer). The manager keeps it
    for its (task, session) policies while no listing or record it came from
    changes, so a warm send gets this same object back; `made` is what each
    of the loop's tool sources made of `specs` (mcp/source.py: its tools and
    aliases), kept with them so it is reused and dropped as they are. Keyed
    by the source: a tool calls back into the source that built it (its
    scrubber), and two sources may share a manager."""

    specs: list[ToolSpec]
    made: dict[object, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class McpOutcome:
    """The result of one call: `content` is the tool message."""

    content: str
    is_error: bool
    code: str | None
    duration_ms: float
    server_id: str
    tool: str
    truncated: bool = False


@dataclass(frozen=True)
class ServerStatus:
    server_id: str
    display_name: str
    transport: str
    source: str
    state: str  # disabled | idle | starting | ready | failed | closed
    disabled_reason: str | None
    last_error: str | None
    starts: int
    pid: int | None
    tools: tuple[str, ...] | None  # after allowed_tools; None = never listed
    hidden_tools: int | None  # listed by the server but not in allowed_tools
