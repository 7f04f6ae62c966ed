"""The guest's funcref table as a tool source (chat.protocol.ToolSource).

A tool registered with cchat_write_fn is known by its table index; calling it
is guestcall.call_tool under the session's tool arena, if it declared one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from spearpy.chat.protocol import CallBudget, ToolOutcome
from spearpy.guestcall import call_tool

if TYPE_CHECKING:
    from spearpy.instance import GuestRun


class GuestTools:
    kind = "guest"
    __slots__ = ("_run",)

    def __init__(self, run: GuestRun) -> None:
        self._run = run

    def call(self, ref: Any, arguments: str, budget: CallBudget) -> ToolOutcome:
        # The session's tool arena (tool_arena_ptr/_len params), if it set one.
        params = budget.params
        ptr, length = params.get("tool_arena_ptr"), params.get("tool_arena_len")
        arena = (ptr, length) if isinstance(ptr, int) and isinstance(length, int) and \
            length > 0 else None
        return call_tool(self._run, int(ref), arguments, budget.max_output_bytes, arena)

