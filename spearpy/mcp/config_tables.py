"""The `[mcp]` table of spearpy's config file: where MCP records live.

    [mcp]
    dirs = ["mcp.d"]                 # record directories, relative to the file
    dir = "mcp.d"                    # SPEAR's (SMS's) singular form, beside or instead

    [[mcp.servers]]                  # records inline, in the mcp.d format
    server_id = "time"
    transport = "stdio"
    allowed_tools = ["*"]
    stdio = { command = "mcp-server-time" }

spearpy/config_file.py reads the file; this module owns this table. SMS's
`SMS_MCP_DIR` environment variable names one more record directory, with or
without a file.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from spearpy.config_file import ConfigFile
from spearpy.errors import ConfigError

_KEYS = ("dir", "dirs", "servers")
SMS_MCP_DIR = "SMS_MCP_DIR"


def mcp_tables(file: ConfigFile) -> tuple[list[Path], list[dict[str, Any]]]:
    """(record dirs, inline records) of the file and SMS_MCP_DIR; no `[mcp]`
    table gives SMS_MCP_DIR's only. Raises ConfigError naming the file, the
    table and the key."""
    where = file.label
    table = file.table("mcp")
    unknown = sorted(set(table) - set(_KEYS))
    if unknown:
        raise ConfigError(f"{where}: unknown keys in [mcp]: {unknown}; allowed: "
                          f"{', '.join(_KEYS)}")
    dirs, servers = table.get("dirs", []), table.get("servers", [])
    if not isinstance(dirs, list) or not all(isinstance(d, str) for d in dirs):
        raise ConfigError(f"{where}: mcp.dirs must be a list of paths")
    single = table.get("dir")
    if single is not None and (not isinstance(single, str) or not single):
        raise ConfigError(f"{where}: mcp.dir must be a path")
    if not isinstance(servers, list) or not all(isinstance(s, dict) for s in servers):
        raise ConfigError(f"{where}: mcp.servers must be an array of tables ([[mcp.servers]])")
    found = [file.base_dir / d for d in ([single] if single else []) + dirs]
    sms = os.environ.get(SMS_MCP_DIR)
    if sms:
        found.append(Path(sms))
    return found, servers
