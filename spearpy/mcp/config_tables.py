"""The `[mcp]` table of spearpy's config file: where MCP records live.

    [mcp]
    dirs = ["mcp.d"]                 # record directories, relative to the file

    [[mcp.servers]]                  # records inline, in the mcp.d format
    server_id = "time"
    transport = "stdio"
    allowed_tools = ["*"]
    stdio = { command = "mcp-server-time" }

spearpy/config_file.py reads the file; this module owns this table.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from spearpy.config_file import ConfigFile
from spearpy.errors import ConfigError

_KEYS = ("dirs", "servers")


def mcp_tables(file: ConfigFile) -> tuple[list[Path], list[dict[str, Any]]]:
    """(record dirs, inline records) of the file; no `[mcp]` table gives
    nothing. Raises ConfigError naming the file, the table and the key."""
    where = file.label
    table = file.table("mcp")
    unknown = sorted(set(table) - set(_KEYS))
    if unknown:
        raise ConfigError(f"{where}: unknown keys in [mcp]: {unknown}; allowed: "
                          f"{', '.join(_KEYS)}")
    dirs, servers = table.get("dirs", []), table.get("servers", [])
    if not isinstance(dirs, list) or not all(isinstance(d, str) for d in dirs):
        raise ConfigError(f"{where}: mcp.dirs must be a list of paths")
    if not isinstance(servers, list) or not all(isinstance(s, dict) for s in servers):
        raise ConfigError(f"{where}: mcp.servers must be an array of tables ([[mcp.servers]])")
    return [file.base_dir / d for d in dirs], servers
