"""The guest's funcref table as a tool source (chat.protocol.ToolSource).

A tool registered with cchat_write_fn is known by its table index; calling it
is guestcall's GuestTools.call under the session's tool arena, if it declared
one. The source lives in guestcall.py with the call it makes, so a tool call
is one Python call, not a method calling a function.
"""

from __future__ import annotations

from spearpy.guestcall import GuestTools, tool_arena

__all__ = ["GuestTools", "tool_arena"]
