"""Tool sources: where the tools a session offers come from.

Each source implements `chat.protocol.ToolSource` (`kind`, `call(ref,
arguments, budget) -> ToolOutcome`): the guest's funcref table
(`tools.guest.GuestTools`), Python functions (`tools.python.PythonTools`) and
MCP servers (`mcp.source.McpTools`). `tools.sources.HostTools` gathers the
Host's own sources and attaches them to a session at each send. A new source
is one class here (or in its own package, as MCP is) plus a line in
HostTools; limits, approvals, the result cache, redaction and events stay
in the loop and the driver, for every source alike.
"""

from spearpy.tools.python import PythonTools

__all__ = ["PythonTools"]
