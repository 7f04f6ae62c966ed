"""The `spearpy` command."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click

from spearpy.config import HostConfig
from spearpy.errors import SpearpyError
from spearpy.host import Host
from spearpy.inspect import inspect_module

# Options shared by every command that runs guests; None = not given, so the
# environment (OPENAI_BASE_URL, SPEARPY_*) and the defaults apply.
_HOST_OPTIONS: list[tuple[str, dict[str, Any]]] = [
    ("--base-url", {"help": "OpenAI-compatible base URL [env OPENAI_BASE_URL]"}),
    ("--api-key-env", {"help": "name of the env var holding the API key [OPENAI_API_KEY]"}),
    ("--model", {"help": "model used when the guest sets none [env SPEARPY_MODEL]"}),
    ("--backend", {"help": "`openai` (default) or `scripted:FILE` (built-in offline model)"}),
    ("--request-timeout", {"type": float, "help": "seconds per upstream request"}),
    ("--max-retries", {"type": int, "help": "retries of a failed upstream request [2]"}),
    ("--max-iterations", {"type": int, "help": "default completions per auto send [8]"}),
    ("--max-tool-calls", {"type": int, "help": "default tool executions per auto send [32]"}),
    ("--max-tool-output-bytes", {"type": int, "help": "default largest tool output [65536]"}),
    ("--timeout", {"type": float, "help": "wall-clock deadline of the whole run, seconds"}),
    ("--tool-timeout", {"type": float, "help": "deadline of one tool call, seconds"}),
    ("--fuel", {"type": int, "help": "CPU budget in wasmtime fuel units"}),
    ("--max-memory", {"type": int, "help": "linear memory cap, bytes"}),
    ("--max-open-fds", {"type": int, "help": "open fds per instance [1024]"}),
    ("--max-log-bytes", {"type": int, "help": "guest log bytes per run"}),
]


def _host_options(func: Any) -> Any:
    for flag, kwargs in reversed(_HOST_OPTIONS):
        func = click.option(flag, default=None, **kwargs)(func)
    return click.option("--no-cache", is_flag=True, help="do not use the on-disk compile cache")(
        func)


def _host_from(options: dict[str, Any]) -> Host:
    given = {k: v for k, v in options.items() if v is not None and k != "no_cache"}
    if options.get("no_cache"):
        given["cache_dir"] = None
    try:
        return Host(HostConfig(**given))
    except ValueError as exc:
        raise click.UsageError(str(exc)) from exc


def _parse_env(pairs: tuple[str, ...]) -> dict[str, str]:
    env = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"expected K=V, got {pair!r}", param_hint="--env")
        env[key] = value
    return env


def _parse_dirs(specs: tuple[str, ...]) -> list[tuple[str, str]]:
    dirs = []
    for spec in specs:
        host_path, _, guest_path = spec.partition(":")
        if not Path(host_path).is_dir():
            raise click.BadParameter(f"{host_path!r} is not a directory", param_hint="--dir")
        dirs.append((host_path, guest_path or host_path))
    return dirs


@click.group()
@click.version_option(package_name="spearpy")
def main() -> None:
    """Run SPEAR-ABI WebAssembly agents with chat-completion hostcalls."""


@main.command(context_settings={"ignore_unknown_options": False})
@click.argument("module", type=click.Path(exists=True, dir_okay=False))
@click.argument("guest_args", nargs=-1, type=click.UNPROCESSED)
@click.option("--env", "env_pairs", multiple=True, help="guest env var K=V (repeatable)")
@click.option("--env-inherit", is_flag=True, help="give the guest this process's environment")
@click.option("--dir", "dir_specs", multiple=True, help="preopen HOST[:GUEST] (repeatable)")
@click.option("--invoke", default=None, help="call this export instead of _start")
@_host_options
def run(module: str, guest_args: tuple[str, ...], env_pairs: tuple[str, ...], env_inherit: bool,
        dir_specs: tuple[str, ...], invoke: str | None, **options: Any) -> None:
    """Run MODULE; arguments after `--` go to the guest."""
    env = _parse_env(env_pairs)
    dirs = _parse_dirs(dir_specs)
    host = _host_from(options)
    try:
        result = host.run(module, list(guest_args), env=env or None, inherit_env=env_inherit,
                          dirs=dirs, invoke=invoke, capture_output=False)
    except SpearpyError as exc:
        click.echo(f"spearpy: {exc}", err=True)
        sys.exit(65)
    finally:
        host.close()
    if result.outcome != "exited":
        click.echo(f"spearpy: {result.outcome}: {result.message}", err=True)
    sys.exit(result.exit_code)


@main.command()
@click.argument("module", type=click.Path(exists=True, dir_okay=False))
@click.option("--json", "as_json", is_flag=True, help="machine-readable output")
def inspect(module: str, as_json: bool) -> None:
    """Show MODULE's imports and exports and whether spearpy can run it."""
    try:
        report = inspect_module(Path(module).read_bytes())
    except SpearpyError as exc:
        raise click.ClickException(str(exc)) from exc
    if as_json:
        click.echo(json.dumps(report, indent=2))
        return
    click.echo(f"module: {module}")
    click.echo(f"exports memory: {'yes' if report['exports_memory'] else 'no'}")
    click.echo(f"funcref table: {report['funcref_table'] or 'none'}")
    click.echo(f"allocator (spear_alloc/spear_free): {'yes' if report['allocator'] else 'no'}")
    click.echo("spear imports:")
    for item in report["spear_imports"]:
        state = "provided" if item["provided"] else "MISSING"
        if item["provided"] and item["enosys"]:
            state = "linked as ENOSYS"
        click.echo(f"  {item['name']:<24} {item['signature']:<32} {state}")
    click.echo("other imports:")
    for item in report["other_imports"]:
        click.echo(f"  {item['module']}.{item['name']}")
    click.echo("exports:")
    for item in report["exports"]:
        click.echo(f"  {item['name']:<28} {item['kind']}")
    click.echo(f"runnable: {'yes' if report['runnable'] else 'no'}")
    for problem in report["problems"]:
        click.echo(f"  problem: {problem}")


from spearpy.demo import demo  # noqa: E402 - registers the command on `main`

main.add_command(demo)
