"""MCP servers as a tool source of the loop (chat.protocol.ToolSource).

For each send the driver asks `McpTools.offer` which MCP tools the three
policy layers let this session see; they are attached to the session's
registry under SPEAR's names, so the loop checks, caches, limits and reports
an MCP call exactly like a guest call. `call` runs one on the Host's shared
MCP manager. What a server returns passes the Host's secret scrubber before
the model or the guest sees it.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from spearpy import _json
from spearpy.chat.protocol import CallBudget, ToolOutcome
from spearpy.chat.registry import Tool, ToolRegistry, schema_problem
from spearpy.mcp.naming import NameTable
from spearpy.mcp.policy import Approval, SessionPolicy, TaskPolicy
from spearpy.mcp.results import MCP_TOOL_FAILED

if TYPE_CHECKING:
    from spearpy.mcp.client import McpManager
    from spearpy.observe.scrub import SecretScrubber

GROUP = "mcp"


@dataclass(slots=True)
class Offer:
    """What one send may call: tools to attach, aliases, servers that failed."""

    tools: list[Tool] = field(default_factory=list)
    aliases: dict[str, str] = field(default_factory=dict)
    failures: dict[str, str] = field(default_factory=dict)  # server id -> why


class McpTools:
    kind = "mcp"

    def __init__(self, manager: McpManager, scrubber: SecretScrubber) -> None:
        self._manager = manager
        self._scrubber = scrubber

    def offer(self, task: TaskPolicy, session: SessionPolicy, *, deadline: float | None,
              cancel: threading.Event | None) -> Offer:
        specs, failed = self._manager.offered_tools(task, session, deadline=deadline,
                                                    cancel=cancel)
        names = NameTable()
        offer = Offer(failures={sid: f"{err.code}: {err}" for sid, err in failed.items()})
        for spec in specs:
            name = names.add(spec.server_id, spec.name)
            wire = spec.to_openai(name)
            function = wire["function"]
            if function.get("description") is None:
                del function["description"]  # strict servers refuse a null
            problem = schema_problem(function["parameters"])
            if problem is not None:
                offer.failures[spec.server_id] = f"tool {spec.name!r} left out: {problem}"
                continue
            approval = self._manager.approval(spec.server_id, spec.name)
            offer.tools.append(ToolRegistry.build(
                name, (spec.server_id, spec.name), wire, self,
                approval=_APPROVALS.get(approval, "deny"), origin=spec.server_id))
            # SPEAR's spellings route to the same tool, whatever name was offered.
            offer.aliases[f"mcp.{spec.server_id}.{spec.name}"] = name
            offer.aliases[spec.spear_name] = name
        return offer

    def call(self, ref: Any, arguments: str, budget: CallBudget) -> ToolOutcome:
        server_id, tool = ref
        try:
            args = _json.loads(arguments) if arguments.strip() else {}
        except (ValueError, RecursionError):
            args = None  # the manager refuses it as mcp_invalid_arguments
        outcome = self._manager.call_tool(server_id, tool, args, deadline=budget.deadline,
                                          cancel=budget.cancel,
                                          max_output_bytes=budget.max_output_bytes)
        content = self._scrubber.text(outcome.content)
        if not outcome.is_error:
            return ToolOutcome(ok=True, output=content, duration_ms=outcome.duration_ms)
        return ToolOutcome(ok=False, error_code=outcome.code or MCP_TOOL_FAILED,
                           error_message=_message_of(content),
                           duration_ms=outcome.duration_ms)


_APPROVALS = {Approval.ALLOW: "allow", Approval.DENY: "deny", Approval.ASK: "ask"}


def _message_of(content: str) -> str:
    """The message of SPEAR's {"error": {"code", "message"}} shape, else the text."""
    try:
        value = json.loads(content)
    except ValueError:
        return content
    error = value.get("error") if isinstance(value, dict) else None
    message = error.get("message") if isinstance(error, dict) else None
    return message if isinstance(message, str) else content
