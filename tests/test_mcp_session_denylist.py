"""The session's MCP tool denylist, end to end: a guest that sets
`mcp.tool_denylist` with cchat_ctl is never offered a matching tool, even
one its own allowlist names, and a model that calls it anyway gets an
error, not the tool (the unit test of the layers is in test_mcp_policy)."""

from __future__ import annotations

import json

from spearpy.host import Host
from spearpy.mcp.naming import spear_tool_name
from tests.test_mcp_loop import ECHO, calls_then_answer, host, send, tool_replies, upstream

__all__ = ["host", "upstream"]  # the fixtures, shared with test_mcp_loop

FAIL = spear_tool_name("tb", "fail")


def test_the_guests_denylist_hides_and_refuses_a_tool(host: Host) -> None:
    body, _, requests = send(host, calls_then_answer((ECHO, {"text": "denied"})), params={
        "mcp.server_ids": ["tb"], "mcp.tool_allowlist": ["ec*", "fa*"],
        "mcp.tool_denylist": ["ech?"]})
    offered = [t["function"]["name"] for t in requests[0].body["tools"]]
    assert offered == [FAIL]  # the denylist vetoes what the allowlist lets through
    (content,) = tool_replies(requests).values()
    assert json.loads(content)["error"]["code"] == "unknown_tool"  # never run
    assert body["choices"][0]["message"]["content"] == f"done: {content}"
