"""The `spearpy` command: one module per subcommand.

A subcommand's module is imported only when that command runs (or help lists
the commands): `spearpy run` must not pay for batch's executors, rich's
progress bar or the demo's samples at start-up.
"""

from __future__ import annotations

import gc
import importlib
from typing import Any

import click

from spearpy import __version__

# command name -> (module, attribute, the one line `spearpy --help` shows).
# The line is kept here so that listing the commands imports none of them
# (nor wasmtime, httpx or pydantic-settings through them).
_COMMANDS = {
    "batch": ("spearpy.cli.batch", "batch",
              "Run MODULE once per input line, writing one result line per input."),
    "build": ("spearpy.cli.build", "build",
              "Build the guest at PATH (default: here) to a wasm32 module."),
    "demo": ("spearpy.cli.demo", "demo",
             "Run a tool-calling sample guest against the built-in scripted model."),
    "inspect": ("spearpy.cli.inspect_cmd", "inspect",
                "Show MODULE's imports and exports and whether spearpy can run it."),
    "mcp": ("spearpy.cli.mcp_cmd", "mcp",
            "MCP tool servers: list the registry, call a tool, serve a guest's tools."),
    "new": ("spearpy.cli.new", "new",
            "Create NAME/, a guest with one tool that builds and runs as it is."),
    "replay": ("spearpy.cli.durable_cmd", "replay",
               "Re-execute a journaled run offline; stop at a step, or fork it live from one."),
    "resume": ("spearpy.cli.durable_cmd", "resume",
               "Go on with a journaled run after a crash, no paid call repeated."),
    "routes": ("spearpy.cli.routes_cmd", "routes",
               "Model aliases and routes across backends."),
    "run": ("spearpy.cli.run", "run", "Run MODULE; arguments after `--` go to the guest."),
    "serve": ("spearpy.serve.cli", "serve",
              "Run agents from MODULES as a service: HTTP API, live events, a web page."),
    "show": ("spearpy.cli.show", "show",
             "Show a finished run's conversation, or a journal's steps."),
    "stream": ("spearpy.cli.stream_cmd", "stream",
               "Send stdin lines to a served run's user stream; print what it sends back."),
}


class _LazyGroup(click.Group):
    # Set while main() holds the collector off for the command's imports.
    _gc_paused = False

    def main(self, *args: Any, **kwargs: Any) -> Any:
        """click's main; when it runs the process's own command line, the
        collector sits out the start-up imports and the interpreter's teardown.

        No arguments given means click reads sys.argv: this is the `spearpy`
        (or `python -m spearpy`) process itself, and in standalone mode main()
        only ends by exiting. A caller passing arguments (tests, CliRunner,
        an embedder) keeps its collector exactly as it was.

        Start-up imports ~420 modules (pydantic, wasmtime, click and their
        kin): with the collector on, the objects they create trigger repeated
        collections over a growing heap (~10 ms of `spearpy run`), and at exit
        the interpreter's teardown collects over all of it again (~30 ms).
        Module-level objects live as long as the process, so the collector
        has nothing to find in them: it is paused until the command's module
        is imported, what exists then is frozen (never scanned again; the
        gc.freeze documentation's disable/freeze/enable pattern), and all is
        frozen again at exit. atexit handlers still run (log files, spans)
        and module teardown still releases what it holds; only garbage left
        in reference cycles at exit goes unfinalised, as CPython permits.
        """
        given = args[0] if args else kwargs.get("args")
        standalone = args[3] if len(args) > 3 else kwargs.get("standalone_mode", True)
        entry = given is None and standalone and gc.isenabled()
        if entry:
            gc.disable()
            self._gc_paused = True
        try:
            return super().main(*args, **kwargs)
        finally:
            if entry:
                gc.freeze()

    def _resume_gc(self) -> None:
        """The command's imports are done: what they built is frozen, and the
        collector runs again for the command itself (a long `run` or `serve`
        must not pile up garbage)."""
        if self._gc_paused:
            self._gc_paused = False
            gc.freeze()
            gc.enable()

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *_COMMANDS})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in _COMMANDS:
            module, attr, _ = _COMMANDS[cmd_name]
            try:
                command = getattr(importlib.import_module(module), attr)
            finally:
                self._resume_gc()
            self.add_command(command, cmd_name)
        return super().get_command(ctx, cmd_name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(name, _COMMANDS[name][2]) for name in sorted(_COMMANDS)]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


@click.group(cls=_LazyGroup)
# The version as spearpy/__init__.py states it (pyproject.toml reads it from
# there): asking importlib.metadata would import it, ~25 ms of `--version`.
@click.version_option(version=__version__, package_name="spearpy")
def main() -> None:
    """Run SPEAR-ABI WebAssembly agents with chat-completion hostcalls."""
