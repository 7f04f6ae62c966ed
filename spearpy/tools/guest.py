"""The guest's funcref table as a tool source (chat.protocol.ToolSource).

A tool registered with cchat_write_fn is known by its table index; calling it
is guestcall.call_tool under the session's tool arena, if it declared one.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from spearpy.chat.protocol import CallBudget, ToolOutcome
from spearpy.guestcall import call_tool

if TYPE_CHECKING:
    from spearpy.instance import GuestRun


class GuestTools:
    kind = "guest"
    __slots__ = ("_arena", "_budget", "_run")

    def __init__(self, run: GuestRun) -> None:
        self._run = run
        # The arena of the send whose budget came last. A session's params
        # cannot change while it sends (the hostcalls refuse), so it is read
        # from them once per send, not on every call.
        self._budget: CallBudget | None = None
        self._arena: tuple[int, int] | None = None

    def call(self, ref: Any, arguments: str, budget: CallBudget) -> ToolOutcome:
        if budget is not self._budget:
            self._budget, self._arena = budget, tool_arena(budget.params)
        return call_tool(self._run, int(ref), arguments, budget.max_output_bytes, self._arena)


def tool_arena(params: Mapping[str, Any]) -> tuple[int, int] | None:
    """The session's tool arena (tool_arena_ptr/_len params), if it set one."""
    ptr, length = params.get("tool_arena_ptr"), params.get("tool_arena_len")
    return (ptr, length) if isinstance(ptr, int) and isinstance(length, int) and \
        length > 0 else None
