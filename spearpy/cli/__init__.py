"""The `spearpy` command: one module per subcommand."""

from __future__ import annotations

import click

from spearpy.cli.batch import batch
from spearpy.cli.demo import demo
from spearpy.cli.inspect_cmd import inspect
from spearpy.cli.run import run


@click.group()
@click.version_option(package_name="spearpy")
def main() -> None:
    """Run SPEAR-ABI WebAssembly agents with chat-completion hostcalls."""


main.add_command(run)
main.add_command(inspect)
main.add_command(demo)
main.add_command(batch)
