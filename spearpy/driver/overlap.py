"""How the calls of one reply overlap when a send runs them as a batch
(driver/parallel.py): which run on the guest's thread, and how many may run
at once, the figure a batch's tool events carry as `parallel`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from spearpy.chat.protocol import CallTool


def overlap(actions: list[CallTool], limit: int, journaled: bool) -> int:
    """How many of a batch's calls may run at once: up to `limit` non-guest
    calls on workers and, unjournaled, one guest call beside them on the
    guest's thread. Journaled, a guest call waits for every call before it
    and the calls after it wait for it, so it runs alone: the most is the
    longest stretch of non-guest calls between guest calls, up to `limit`."""
    if not journaled:
        others = sum(not is_guest(action) for action in actions)
        return min(others, limit) + (others < len(actions))
    longest = stretch = 0
    for action in actions:
        stretch = 0 if is_guest(action) else stretch + 1
        longest = max(longest, stretch)
    return min(longest, limit)


def is_guest(action: CallTool) -> bool:
    """A call of a tool the guest serves (it runs on the guest's thread)."""
    source = action.tool.source
    return source is not None and source.kind == "guest"
