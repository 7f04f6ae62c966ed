"""The `[mcp]` table of spearpy's TOML config file: where MCP records live.

    [mcp]
    dirs = ["mcp.d"]                 # record directories, relative to the file

    [[mcp.servers]]                  # records inline, in the mcp.d format
    server_id = "time"
    transport = "stdio"
    allowed_tools = ["*"]
    stdio = { command = "mcp-server-time" }

    [task]                           # the run's task layer, SPEAR's keys
    "mcp.enabled" = true
    "mcp.default_server_ids" = ["time"]

The rest of the file (backends, routing) is read by spearpy.backends, which
leaves these tables to spearpy.mcp.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any


def _read(path: Path) -> dict[str, Any]:
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ValueError(f"cannot read the config file {str(path)!r}: {exc}") from None


def mcp_sources(path: str | Path) -> tuple[list[Path], list[dict[str, Any]]]:
    """(record dirs, inline records) of the config file at `path`; no `[mcp]`
    table gives nothing. Raises ValueError naming the file and what is wrong."""
    dirs, servers, _task = config_tables(path)
    return dirs, servers


def config_tables(path: str | Path
                  ) -> tuple[list[Path], list[dict[str, Any]], dict[str, Any]]:
    """(record dirs, inline records, `[task]` keys) of the config file, from
    one read of it."""
    path = Path(path)
    raw = _read(path)
    task = raw.get("task", {})
    if not isinstance(task, dict):
        raise ValueError(f"{path}: `task` must be a table of SPEAR task keys")
    table = raw.get("mcp", {})
    if not isinstance(table, dict):
        raise ValueError(f"{path}: `mcp` must be a table")
    unknown = sorted(set(table) - {"dirs", "servers"})
    if unknown:
        raise ValueError(f"{path}: unknown keys in [mcp]: {unknown}; allowed: dirs, servers")
    dirs, servers = table.get("dirs", []), table.get("servers", [])
    if not isinstance(dirs, list) or not all(isinstance(d, str) for d in dirs):
        raise ValueError(f"{path}: mcp.dirs must be a list of paths")
    if not isinstance(servers, list) or not all(isinstance(s, dict) for s in servers):
        raise ValueError(f"{path}: mcp.servers must be an array of tables ([[mcp.servers]])")
    return [path.parent / d for d in dirs], servers, task
