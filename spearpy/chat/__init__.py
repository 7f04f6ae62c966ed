"""Chat sessions, tool registry and the sans-IO tool-call loop (no wasm, no HTTP)."""

from spearpy.chat.loop import ToolLoop
from spearpy.chat.normalize import compact_json, normalize_assistant
from spearpy.chat.params import LimitPolicy, check_param, forwarded_params, resolve_limits
from spearpy.chat.registry import RegistryError, Tool, ToolRegistry, parse_tool_schema
from spearpy.chat.session import ChatSession, tool_error_content
from spearpy.chat.states import LoopProtocolError, LoopState

__all__ = [
    "ChatSession",
    "LimitPolicy",
    "LoopProtocolError",
    "LoopState",
    "RegistryError",
    "Tool",
    "ToolLoop",
    "ToolRegistry",
    "check_param",
    "compact_json",
    "forwarded_params",
    "normalize_assistant",
    "parse_tool_schema",
    "resolve_limits",
    "tool_error_content",
]
