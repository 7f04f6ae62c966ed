"""`spearpy mcp`: look at the MCP registry, call a server's tool, serve a guest's tools.

    spearpy mcp list [--mcp-dir DIR ...] [--config FILE] [--json] [--probe]
    spearpy mcp call SERVER TOOL '{"arg": 1}' [--mcp-dir DIR ...]
    spearpy mcp serve agent.wasm [--invoke NAME] [--http 127.0.0.1:PORT] [--token T]

Records come from SPEARPY_MCP_DIRS, then the config file's `[mcp]` table
(`dirs`, relative to the file, and inline `[[mcp.servers]]` records), then
each `--mcp-dir`: later ones override earlier ones with the same server id.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from spearpy._term import block, one_line
from spearpy.mcp.registry import Registry, load_registry

if TYPE_CHECKING:
    from spearpy.mcp.models import ServerStatus

_MCP_DIR = click.option("--mcp-dir", "mcp_dirs", multiple=True,
                        type=click.Path(file_okay=False),
                        help="a directory of MCP server records (*.toml, *.json); repeatable, "
                             "later ones override earlier ones")
_CONFIG = click.option("--config", "config_file", type=click.Path(dir_okay=False),
                       help="spearpy config file whose [mcp] table names record dirs "
                            "and inline servers [env SPEARPY_CONFIG]")


@click.group()
@click.option("--log-level", default="warning", show_default=True,
              type=click.Choice(["debug", "info", "warning", "error"]),
              help="spearpy's log lines (on stderr: stdout is the output, or the MCP wire)")
def mcp(log_level: str) -> None:
    """MCP tool servers: list the registry, call a tool, serve a guest's tools."""
    from spearpy.observe.logs import configure_logging

    configure_logging(level=log_level, defer=True)


def build_registry(mcp_dirs: tuple[str, ...] = (), config_file: str | None = None) -> Registry:
    """The registry the flags, the config file and the environment describe."""
    from pydantic import ValidationError

    from spearpy.config import HostConfig

    given: dict[str, Any] = {"config_file": config_file} if config_file else {}
    try:
        config = HostConfig(**given)
    except (ValidationError, ValueError) as exc:
        raise click.UsageError(str(exc)) from None
    dirs: list[Path] = list(config.mcp_dirs)
    from spearpy.config_file import read_config_file
    from spearpy.mcp.config_tables import mcp_tables

    try:
        extra_dirs, records = mcp_tables(read_config_file(config.config_file))
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    dirs += extra_dirs
    dirs += [Path(d) for d in mcp_dirs]
    return load_registry(dirs, records)


# ---- list ------------------------------------------------------------------


def _row(status: ServerStatus, registry: Registry) -> dict[str, Any]:
    record = registry.entries[status.server_id].record
    where: dict[str, Any] = {}
    if record.transport == "stdio" and record.stdio is not None:
        where = {"command": record.stdio.command, "args": list(record.stdio.args)}
    elif record.http is not None:
        where = {"url": record.http.url}  # as written: ${VAR} references stay unresolved
    return {
        "server_id": status.server_id, "display_name": status.display_name,
        "transport": status.transport, "source": status.source, **where,
        "enabled": status.disabled_reason is None, "disabled_reason": status.disabled_reason,
        "state": status.state, "started": status.starts > 0, "pid": status.pid,
        "last_error": status.last_error, "allowed_tools": list(record.allowed_tools),
        "tools": None if status.tools is None else list(status.tools),
        "hidden_tools": status.hidden_tools,
    }


def _status_text(row: dict[str, Any]) -> str:
    if not row["enabled"]:
        return f"disabled: {row['disabled_reason']}"
    if row["state"] == "failed":
        return f"failed: {row['last_error']}"
    if not row["started"]:
        return "enabled, not started"
    return f"enabled, {row['state']}" + (f" (pid {row['pid']})" if row["pid"] else "")


def _tools_text(row: dict[str, Any], probed: bool) -> str:
    if not row["allowed_tools"]:
        return "none: allowed_tools is empty (default deny)"
    if row["tools"] is None:
        if not row["enabled"]:
            return "none: the server is disabled"
        return ("unknown: not listed" if probed
                else f"allowed {', '.join(row['allowed_tools'])} (--probe lists them)")
    shown = ", ".join(one_line(name, 80) if name else '""' for name in row["tools"]) or "none"
    hidden = f" (+{row['hidden_tools']} not in allowed_tools)" if row["hidden_tools"] else ""
    return shown + hidden


@mcp.command("list")
@_MCP_DIR
@_CONFIG
@click.option("--json", "as_json", is_flag=True, help="one JSON document on stdout")
@click.option("--probe", is_flag=True,
              help="start every enabled server and list its tools (after allowed_tools)")
def list_servers(mcp_dirs: tuple[str, ...], config_file: str | None, as_json: bool,
                 probe: bool) -> None:
    """The registry's servers: transport, status (and why one is disabled),
    and the tools each exposes. Exit 1 when a record is invalid or, with
    --probe, a server failed to list its tools."""
    from spearpy.mcp.client import McpManager

    registry = build_registry(mcp_dirs, config_file)
    failed: dict[str, str] = {}
    with McpManager(registry) as manager:
        if probe:
            _found, refused = manager.collect_tools(manager.server_ids())
            failed = {sid: f"{err.code}: {err.message}" for sid, err in refused.items()}
        rows = [_row(status, registry) for status in manager.status()]
    for row in rows:
        if row["server_id"] in failed:
            row["last_error"] = row["last_error"] or failed[row["server_id"]]
            row["state"] = "failed"
    errors = [{"source": e.source, "field": e.field, "message": e.message}
              for e in registry.errors]
    if as_json:
        click.echo(json.dumps({"servers": rows, "errors": errors, "notes": registry.notes},
                              indent=2))
    else:
        _print_table(rows, probe)
        for note in registry.notes:
            click.echo(one_line(f"note: {note}"))
        for error in registry.errors:
            click.echo(one_line(f"error: {error}", 2000), err=True)
    sys.exit(1 if errors or failed else 0)


def _print_table(rows: list[dict[str, Any]], probed: bool) -> None:
    if not rows:
        click.echo("no MCP servers (give --mcp-dir DIR, or [mcp] dirs in the config file)")
        return
    # Tool names and errors are the servers' (their stderr included): a
    # terminal must not run the escapes in them.
    for row in rows:
        title = f" ({row['display_name']})" if row["display_name"] else ""
        click.echo(one_line(f"{row['server_id']}{title}  [{row['transport']}]  {row['source']}"))
        where = row.get("url") or " ".join([row.get("command", ""), *row.get("args", [])])
        click.echo(one_line(f"  runs:   {where}"))
        click.echo(one_line(f"  status: {_status_text(row)}", 2000))  # a server's own words
        click.echo(one_line(f"  tools:  {_tools_text(row, probed)}"))


# ---- call ------------------------------------------------------------------


@mcp.command("call")
@click.argument("server")
@click.argument("tool")
@click.argument("arguments", default="{}")
@_MCP_DIR
@_CONFIG
@click.option("--timeout", type=float, help="seconds for the call (the record's budget "
                                            "still applies)")
@click.option("--max-output-bytes", type=int, default=None,
              help="cut the result to this many bytes [the record's budget, 64 KiB]")
def call(server: str, tool: str, arguments: str, mcp_dirs: tuple[str, ...],
         config_file: str | None, timeout: float | None, max_output_bytes: int | None) -> None:
    """Call TOOL of SERVER with ARGUMENTS (a JSON object) and print the result
    as the model would see it. Exit 1 when the call fails."""
    from spearpy.mcp.client import McpManager

    try:
        args = json.loads(arguments)
    except ValueError as exc:
        raise click.BadParameter(f"not JSON: {exc}", param_hint="ARGUMENTS") from None
    if not isinstance(args, dict):
        raise click.BadParameter("must be a JSON object", param_hint="ARGUMENTS")
    registry = build_registry(mcp_dirs, config_file)
    for error in registry.errors:
        click.echo(one_line(f"error: {error}", 2000), err=True)
    with McpManager(registry) as manager:
        outcome = manager.call_tool(server, tool, args, timeout_s=timeout,
                                    max_output_bytes=max_output_bytes)
    # Exact when piped; on a terminal the server's escapes are shown, not run.
    click.echo(block(outcome.content) if sys.stdout.isatty() else outcome.content)
    if outcome.is_error:
        click.echo(f"spearpy mcp call: {outcome.code} after {outcome.duration_ms:.0f} ms",
                   err=True)
        sys.exit(1)


# ---- serve -----------------------------------------------------------------


@mcp.command("serve")
@click.argument("module", type=click.Path(exists=True, dir_okay=False))
@click.argument("guest_args", nargs=-1, type=click.UNPROCESSED)
@click.option("--invoke", default=None,
              help="run this export for the registration instead of _start")
@click.option("--http", "http", default=None, metavar="HOST:PORT",
              help="serve streamable HTTP at http://HOST:PORT/mcp (PORT 0: any free port) "
                   "instead of stdio")
@click.option("--token", default=None,
              help="bearer token every HTTP request needs, at least 16 characters; "
                   "needed to listen on anything but loopback [env SPEARPY_MCP_TOKEN]")
@click.option("--name", default=None, help="the server name MCP clients see [the module's]")
@click.option("--env", "env_pairs", multiple=True, help="guest env var K=V (repeatable)")
@click.option("--dir", "dir_specs", multiple=True, help="preopen HOST[:GUEST] (repeatable)")
@click.option("--tool-timeout", type=float, default=None,
              help="seconds one call may run [30]")
@click.option("--start-timeout", type=float, default=30.0, show_default=True,
              help="seconds the registration may take to reach its first cchat_send")
@click.option("--max-memory", type=int, default=None, help="linear memory cap, bytes")
@click.option("--max-tool-output-bytes", type=int, default=None,
              help="largest tool output [65536]")
@click.option("--no-cache", is_flag=True, help="do not use the on-disk compile cache")
def serve(module: str, guest_args: tuple[str, ...], invoke: str | None, http: str | None,
          token: str | None, name: str | None, env_pairs: tuple[str, ...],
          dir_specs: tuple[str, ...],
          tool_timeout: float | None, start_timeout: float, max_memory: int | None,
          max_tool_output_bytes: int | None, no_cache: bool) -> None:
    """Serve the tools MODULE registers as an MCP server (stdio by default).

    The guest's registration runs until its first cchat_send; the tools it
    registered on that session are served, each call running the guest
    function in the same sandbox and limits as the auto tool loop."""
    from spearpy.host import Host
    from spearpy.mcp.serve import DEFAULT_TOOL_TIMEOUT_S, GuestToolServer, ServeError
    from spearpy.mcp.serve import serve as run_server
    from spearpy.mcp.wire import TOKEN_ENV
    from spearpy.web.guard import check_token, token_from_env

    token = token_from_env(token, TOKEN_ENV) if http is not None else None
    try:
        check_token(token)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--token") from None
    # K=V sets K; a bare NAME passes this process's NAME through (as `run`).
    env: dict[str, str | None] = {k: v if sep else None
                                  for k, sep, v in (p.partition("=") for p in env_pairs)}
    dirs = [(h, g or h) for h, _, g in (d.partition(":") for d in dir_specs)]
    for host_dir, _guest in dirs:
        if not Path(host_dir).is_dir():
            raise click.BadParameter(f"{host_dir!r} is not a directory", param_hint="--dir")
    given = {"tool_timeout": tool_timeout or DEFAULT_TOOL_TIMEOUT_S, "max_memory": max_memory,
             "max_tool_output_bytes": max_tool_output_bytes}
    settings: dict[str, Any] = {k: v for k, v in given.items() if v is not None}
    if no_cache:
        settings["cache_dir"] = None
    try:
        host = Host(**settings)
    except ValueError as exc:  # pydantic's ValidationError included
        raise click.UsageError(str(exc)) from None
    server = GuestToolServer(host, module, list(guest_args), invoke=invoke, env=env or None,
                             dirs=dirs or None, name=name or Path(module).stem,
                             start_timeout=start_timeout)
    try:
        run_server(server, http, announce=lambda line: click.echo(f"spearpy mcp serve: {line}",
                                                                  err=True), token=token)
    except ServeError as exc:
        click.echo(f"spearpy mcp serve: {exc}", err=True)
        sys.exit(1)
    except (ValueError, OSError) as exc:
        raise click.UsageError(str(exc)) from None
    finally:
        host.close()


if __name__ == "__main__":
    mcp()
