"""An MCP server whose tool listing is hostile, for spearpy's tests (official SDK, MCPServer).

    python tests/mcp_servers/untrusted.py LISTING.json

It serves one real tool, `echo`, and lists beside it the tools LISTING.json
describes: a JSON list of raw `tools/list` entries (name, description,
inputSchema, title...), sent as given, whatever the protocol says of them.
Calling one of those answers an error: only the listing matters.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp_types import Tool as MCPTool
from mcp_types import methods

_checked = methods.serialize_server_result


def _unchecked(method: str, version: str, data: dict[str, Any], *rest: Any) -> dict[str, Any]:
    # The SDK checks what its server sends (the runner calls this at each
    # reply); a hostile server does not.
    return data if method == "tools/list" else _checked(method, version, data, *rest)


methods.serialize_server_result = _unchecked  # type: ignore[assignment]


class _Untrusted(MCPServer):
    def __init__(self, extra: list[dict[str, Any]]) -> None:
        super().__init__("untrusted", log_level="WARNING")
        self._extra = extra

    async def list_tools(self) -> list[MCPTool]:
        # model_construct: the SDK would refuse to send what a hostile server sends.
        raw = [MCPTool.model_construct(**{_FIELDS.get(k, k): v for k, v in item.items()})
               for item in self._extra]
        return [*await super().list_tools(), *raw]


_FIELDS = {"inputSchema": "input_schema", "outputSchema": "output_schema"}


def main() -> None:
    server = _Untrusted(json.loads(Path(sys.argv[1]).read_text()) if len(sys.argv) > 1 else [])

    @server.tool()
    def echo(text: str) -> str:
        """Return the text unchanged."""
        return text

    server.run()


if __name__ == "__main__":
    main()
