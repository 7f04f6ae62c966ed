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
from spearpy._term import one_line
from spearpy.chat.protocol import CallBudget, ToolOutcome
from spearpy.chat.registry import Tool, ToolRegistry, schema_problem
from spearpy.mcp.naming import NameTable, ToolNameError, offered_name
from spearpy.mcp.policy import Approval, SessionPolicy, TaskPolicy
from spearpy.mcp.results import MCP_TOOL_FAILED
from spearpy.mcp.vetting import (
    description_problem,
    name_problem,
    schema_shape_problem,
    shown_name,
)

if TYPE_CHECKING:
    from spearpy.mcp.client import McpManager
    from spearpy.mcp.models import McpError, ToolSpec
    from spearpy.observe.scrub import SecretScrubber



@dataclass(slots=True)
class Offer:
    """What one send may call: tools to attach, aliases, and warnings:
    (server id, why) for a server that could not list and for a listed tool
    left out (each tool once per listing, not at every send)."""

    tools: list[Tool] = field(default_factory=list)
    aliases: dict[str, str] = field(default_factory=dict)
    failures: list[tuple[str, str]] = field(default_factory=list)


@dataclass(slots=True)
class _Built:
    spec: ToolSpec
    made: Tool | str  # the tool, or why it is left out
    warned: set[str] = field(default_factory=set)


class McpTools:
    kind = "mcp"

    def __init__(self, manager: McpManager, scrubber: SecretScrubber) -> None:
        self._manager = manager
        self._scrubber = scrubber
        # id(spec) -> what was built of it: vetting a tool and compiling its
        # validator cost ~1 ms a tool, and the manager hands out the same
        # ToolSpec objects until a listing changes (so a warning about one is
        # given once per listing).
        self._built: dict[int, _Built] = {}
        self._warn_lock = threading.Lock()

    def offer(self, task: TaskPolicy, session: SessionPolicy, *, deadline: float | None,
              cancel: threading.Event | None) -> Offer:
        offered, failed = self._manager.offer(task, session, deadline=deadline, cancel=cancel)
        made: tuple[list[Tool], dict[str, str]] | None = offered.made.get(self)
        if made is not None:
            # A warm send: the manager handed back the offer it cached, so the
            # tools, names and aliases are those made of it (and their
            # warnings were given then). Shared by every send that hits;
            # nobody mutates them (ToolRegistry.attach copies what it keeps).
            return Offer(made[0], made[1])
        offer = self._make(offered.specs, failed)
        offered.made[self] = (offer.tools, offer.aliases)
        return offer

    def _make(self, specs: list[ToolSpec], failed: dict[str, McpError]) -> Offer:
        names = NameTable()
        offer = Offer(failures=[(sid, self._warning(f"{err.code}: {err}"))
                                for sid, err in failed.items()])
        for spec in specs:
            built = self._built.get(id(spec))
            if built is None or built.spec is not spec:
                built = self._built[id(spec)] = self._build(spec)
            if isinstance(built.made, str):
                self._warn_once(offer, built, built.made)
                continue
            why = _naming_problem(names, spec)
            if why is not None:
                self._warn_once(offer, built, why)
                continue
            tool = built.made
            offer.tools.append(tool)
            # SPEAR's spellings route to the same tool, whatever name was offered.
            offer.aliases[f"mcp.{spec.server_id}.{spec.name}"] = tool.name
            offer.aliases[spec.spear_name] = tool.name
        if len(self._built) > 4 * len(specs) + 256:
            live = {id(spec) for spec in specs}
            self._built = {k: v for k, v in self._built.items() if k in live}
        return offer

    def _warn_once(self, offer: Offer, built: _Built, why: str) -> None:
        with self._warn_lock:
            if why in built.warned:
                return
            built.warned.add(why)
        offer.failures.append((built.spec.server_id, self._warning(
            f"tool {shown_name(built.spec.name)} left out: {why}")))

    def _warning(self, text: str) -> str:
        # A server's error can quote its stderr, which can quote the credential
        # its record gave it, and escapes; warnings go to events, logs, service
        # clients: one line, no secret.
        return one_line(self._scrubber.text(text), MAX_WARNING_CHARS)

    def _build(self, spec: ToolSpec) -> _Built:
        """The tool for `spec`, or why it cannot be offered. What goes upstream
        (description, schema) passes the secret scrubber first, as results do."""
        why = name_problem(spec.name) or description_problem(spec.description) \
            or schema_shape_problem(spec.input_schema)
        if why is None and self._scrubber.text(spec.name) != spec.name:
            why = "its name holds a secret"  # base64 in the offered name still spells it
        if why is not None:
            return _Built(spec, why)
        wire = self._scrubber.value(spec.to_openai(offered_name(spec.server_id, spec.name)))
        function = wire["function"]
        if function.get("description") is None:
            del function["description"]  # strict servers refuse a null
        problem = schema_problem(function["parameters"])
        if problem is not None:
            return _Built(spec, f"its input schema {problem}")
        approval = self._manager.approval(spec.server_id, spec.name)
        return _Built(spec, ToolRegistry.build(
            function["name"], (spec.server_id, spec.name), wire, self,
            approval=_APPROVALS.get(approval, "deny"), origin=spec.server_id))

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


MAX_WARNING_CHARS = 2000
_APPROVALS = {Approval.ALLOW: "allow", Approval.DENY: "deny", Approval.ASK: "ask"}


def _naming_problem(names: NameTable, spec: ToolSpec) -> str | None:
    """Why `spec` cannot have its name in this send: listed twice, or its
    name is already another tool's."""
    if names.name_of(spec.server_id, spec.name) is not None:
        return "it is listed twice (the first is offered)"
    try:
        names.add(spec.server_id, spec.name)
    except ToolNameError as exc:
        return str(exc)
    return None


def _message_of(content: str) -> str:
    """The message of SPEAR's {"error": {"code", "message"}} shape, else the text."""
    try:
        value = json.loads(content)
    except ValueError:
        return content
    error = value.get("error") if isinstance(value, dict) else None
    message = error.get("message") if isinstance(error, dict) else None
    return message if isinstance(message, str) else content
