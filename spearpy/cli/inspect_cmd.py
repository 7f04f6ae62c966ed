"""`spearpy inspect`: what a module imports and exports."""

from __future__ import annotations

import json
from pathlib import Path

import click

from spearpy.errors import SpearpyError
from spearpy.inspect import IMPLEMENTED, inspect_module

_STATES = {IMPLEMENTED: "implemented"}
_UNKNOWN = "UNKNOWN: nothing provides it"


@click.command()
@click.argument("module", type=click.Path(exists=True, dir_okay=False))
@click.option("--json", "as_json", is_flag=True, help="machine-readable output")
def inspect(module: str, as_json: bool) -> None:
    """Show MODULE's imports and exports and whether spearpy can run it.

    Each import is implemented or unknown (the module cannot be instantiated).
    """
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
        state = _STATES.get(item["status"], _UNKNOWN)
        click.echo(f"  {item['name']:<24} {item['signature']:<32} {state}")
    click.echo("other imports:")
    for item in report["other_imports"]:
        state = _STATES.get(item["status"], _UNKNOWN)
        click.echo(f"  {item['module']}.{item['name']:<24} {state}")
    click.echo("exports:")
    for item in report["exports"]:
        click.echo(f"  {item['name']:<28} {item['kind']}")
    click.echo(f"runnable: {'yes' if report['runnable'] else 'no'}")
    for problem in report["problems"]:
        click.echo(f"  problem: {problem}")
