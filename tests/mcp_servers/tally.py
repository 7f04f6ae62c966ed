"""An MCP server that keeps a tally of its calls in a file (argv[1]): a test
counts what reached the server, not what the host says it called.

    python tests/mcp_servers/tally.py TALLY_FILE
"""

from __future__ import annotations

import sys

from mcp.server.mcpserver import MCPServer

server = MCPServer("tally", log_level="WARNING")
TALLY = sys.argv[1]


@server.tool()
def tally(text: str) -> str:
    """Count one call, and answer with its text."""
    with open(TALLY, "a", encoding="utf-8") as fh:
        fh.write(text + "\n")
    return f"tallied {text}"


if __name__ == "__main__":
    server.run()
