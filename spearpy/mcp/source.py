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
    from spearpy.mcp.models import ToolSpec
    from spearpy.observe.scrub import SecretScrubber



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
        # id(spec) -> (spec, offered name, the built tool or why it is left out):
        # checking a schema and compiling its validator cost ~1 ms a tool, and
        # the manager hands out the same ToolSpec objects until a listing changes.
        self._built: dict[int, tuple[ToolSpec, str, Tool | str]] = {}

    def offer(self, task: TaskPolicy, session: SessionPolicy, *, deadline: float | None,
              cancel: threading.Event | None) -> Offer:
        specs, failed = self._manager.offered_tools(task, session, deadline=deadline,
                                                    cancel=cancel)
        names = NameTable()
        offer = Offer(failures={sid: f"{err.code}: {err}" for sid, err in failed.items()})
        for spec in specs:
            name = names.add(spec.server_id, spec.name)
            built = self._built.get(id(spec))
            if built is None or built[0] is not spec or built[1] != name:
                built = self._built[id(spec)] = (spec, name, self._build(spec, name))
            tool = built[2]
            if isinstance(tool, str):
                offer.failures[spec.server_id] = tool
                continue
            offer.tools.append(tool)
            # SPEAR's spellings route to the same tool, whatever name was offered.
            offer.aliases[f"mcp.{spec.server_id}.{spec.name}"] = name
            offer.aliases[spec.spear_name] = name
        if len(self._built) > 4 * len(specs) + 256:
            live = {id(spec) for spec in specs}
            self._built = {k: v for k, v in self._built.items() if k in live}
        return offer

    def _build(self, spec: ToolSpec, name: str) -> Tool | str:
        wire = spec.to_openai(name)
        function = wire["function"]
        if function.get("description") is None:
            del function["description"]  # strict servers refuse a null
        problem = schema_problem(function["parameters"])
        if problem is not None:
            return f"tool {spec.name!r} left out: {problem}"
        approval = self._manager.approval(spec.server_id, spec.name)
        return ToolRegistry.build(name, (spec.server_id, spec.name), wire, self,
                                  approval=_APPROVALS.get(approval, "deny"),
                                  origin=spec.server_id)

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
