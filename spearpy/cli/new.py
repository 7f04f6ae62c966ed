"""`spearpy new`: start a guest project."""

from __future__ import annotations

import shlex
from pathlib import Path

import click


@click.command()
@click.argument("name")
@click.option("--lang", type=click.Choice(["c", "rust"]), required=True,
              help="the guest's language")
@click.option("--tool", "tool", default="word_count", show_default=True,
              help="name of the tool the guest registers (a C/Rust function name)")
@click.option("--dir", "parent", type=click.Path(file_okay=False), default=".",
              show_default=True, help="where to create the NAME directory")
def new(name: str, lang: str, tool: str, parent: str) -> None:
    """Create NAME/, a guest with one tool that builds and runs as it is.

    It holds the source (using the SDK, copied in), a scripted-model script
    that exercises the tool, and a README with the three commands: build,
    run on the scripted model, run against a real server.
    """
    from spearpy.build.sdk import SdkMissing
    from spearpy.scaffold import ScaffoldError, create

    try:
        target, files = create(name, lang, tool=tool, parent=Path(parent))
    except (ScaffoldError, SdkMissing) as exc:
        raise click.UsageError(str(exc)) from exc
    click.echo(f"created {target}/ ({lang}, tool {tool!r}, {len(files)} files)")
    click.echo("next:")
    click.echo(f"  cd {shlex.quote(str(target))}")
    click.echo("  spearpy build")
    click.echo(f"  spearpy run --backend scripted:script.json {name}.wasm")
