"""The fields of the tool events, typed once: the driver builds them here
(for calls it ran and for calls the loop answered without running), and the
sinks read them through these types instead of guessing keys."""

from __future__ import annotations

from typing import TypedDict


class ToolStart(TypedDict):
    tool_call_id: str
    name: str
    args_bytes: int
    cached: bool
    iteration: int
    executed: bool  # False: answered by the loop (unknown tool, cache hit, not run)
    source: str | None  # "guest" | "mcp" | "python"; None when not executed
    server: str | None  # the MCP server, for an MCP tool


class ToolEnd(TypedDict):
    tool_call_id: str
    name: str
    rc: int | None
    duration_ms: float
    output_bytes: int
    error: str | None
    cached: bool
    iteration: int
    executed: bool
    source: str | None
    server: str | None
    registered: bool  # the name is a registered tool's (only then a metrics label)


def tool_start(call_id: str, name: str, arguments: str, *, iteration: int, executed: bool,
               cached: bool = False, source: str | None = None,
               server: str | None = None) -> ToolStart:
    return ToolStart(tool_call_id=call_id, name=name, args_bytes=len(arguments.encode()),
                     cached=cached, iteration=iteration, executed=executed, source=source,
                     server=server)


def tool_end(call_id: str, name: str, *, iteration: int, executed: bool, registered: bool,
             rc: int | None = None, duration_ms: float = 0.0, output: str = "",
             error: str | None = None, cached: bool = False, source: str | None = None,
             server: str | None = None) -> ToolEnd:
    return ToolEnd(tool_call_id=call_id, name=name, rc=rc, duration_ms=round(duration_ms, 3),
                   output_bytes=len(output.encode()), error=error, cached=cached,
                   iteration=iteration, executed=executed, source=source, server=server,
                   registered=registered)
