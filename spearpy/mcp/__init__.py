"""MCP tool servers for spearpy (issue 15): registry, policy, naming, results, client.

Only this package imports the MCP SDK. Names are imported on first use, so
`import spearpy.mcp` costs nothing until a piece is needed: the policy and
naming functions never load the SDK; `McpManager` does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from spearpy._lazy import lazy_names

if TYPE_CHECKING:
    from spearpy.mcp.client import McpManager
    from spearpy.mcp.models import McpError, McpOutcome, ServerStatus, ToolSpec
    from spearpy.mcp.naming import (
        NameTable,
        ToolNameError,
        is_mcp_name,
        parse_tool_name,
        spear_tool_name,
    )
    from spearpy.mcp.policy import (
        Approval,
        SessionPolicy,
        TaskPolicy,
        apply_session_param,
        approval_for,
        call_denial,
        check_session_param,
        effective_servers,
        effective_tools,
        session_from_params,
        tool_denial,
    )
    from spearpy.mcp.records import ServerRecord
    from spearpy.mcp.registry import RecordError, Registry, ServerEntry, load_registry
    from spearpy.mcp.results import ERROR_CODES, error_content, render_result, truncate

_WHERE = {
    "McpManager": "client",
    "McpError": "models", "McpOutcome": "models", "ServerStatus": "models", "ToolSpec": "models",
    "NameTable": "naming", "ToolNameError": "naming", "is_mcp_name": "naming",
    "parse_tool_name": "naming", "spear_tool_name": "naming",
    "Approval": "policy", "SessionPolicy": "policy", "TaskPolicy": "policy",
    "apply_session_param": "policy", "approval_for": "policy", "call_denial": "policy",
    "check_session_param": "policy", "effective_servers": "policy", "effective_tools": "policy",
    "session_from_params": "policy", "tool_denial": "policy",
    "ServerRecord": "records",
    "Registry": "registry", "RecordError": "registry", "ServerEntry": "registry",
    "load_registry": "registry",
    "ERROR_CODES": "results", "error_content": "results", "render_result": "results",
    "truncate": "results",
}
__all__ = [
    "ERROR_CODES",
    "Approval",
    "McpError",
    "McpManager",
    "McpOutcome",
    "NameTable",
    "RecordError",
    "Registry",
    "ServerEntry",
    "ServerRecord",
    "ServerStatus",
    "SessionPolicy",
    "TaskPolicy",
    "ToolNameError",
    "ToolSpec",
    "apply_session_param",
    "approval_for",
    "call_denial",
    "check_session_param",
    "effective_servers",
    "effective_tools",
    "error_content",
    "is_mcp_name",
    "load_registry",
    "parse_tool_name",
    "render_result",
    "session_from_params",
    "spear_tool_name",
    "tool_denial",
    "truncate",
]

__getattr__ = lazy_names(__name__, _WHERE)
