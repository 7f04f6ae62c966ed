"""The `spearpy` command: one module per subcommand.

A subcommand's module is imported only when that command runs (or help lists
the commands): `spearpy run` must not pay for batch's executors, rich's
progress bar or the demo's samples at start-up.
"""

from __future__ import annotations

import importlib

import click

# command name -> (module, attribute); listed here so nothing is imported early.
_COMMANDS = {
    "run": ("spearpy.cli.run", "run"),
    "inspect": ("spearpy.cli.inspect_cmd", "inspect"),
    "demo": ("spearpy.cli.demo", "demo"),
    "batch": ("spearpy.cli.batch", "batch"),
    "serve": ("spearpy.serve.cli", "serve"),
    "build": ("spearpy.cli.build", "build"),
    "new": ("spearpy.cli.new", "new"),
    "show": ("spearpy.cli.show", "show"),
    "mcp": ("spearpy.mcp.cli", "mcp"),
    "routes": ("spearpy.backends.routing_cli", "routes"),
}


class _LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *_COMMANDS})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in _COMMANDS:
            module, attr = _COMMANDS[cmd_name]
            command = getattr(importlib.import_module(module), attr)
            self.add_command(command, cmd_name)
        return super().get_command(ctx, cmd_name)


@click.group(cls=_LazyGroup)
@click.version_option(package_name="spearpy")
def main() -> None:
    """Run SPEAR-ABI WebAssembly agents with chat-completion hostcalls."""
