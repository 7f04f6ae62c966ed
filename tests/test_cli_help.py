"""`spearpy --help` lists every command without importing any of them: no
wasmtime, httpx, pydantic-settings or structlog at start-up for help."""

from __future__ import annotations

import contextlib
import gc
import subprocess
import sys

import click

from spearpy.cli import _COMMANDS, main

_PROBE = """
import sys
from spearpy.cli import main
try:
    main(["--help"])
except SystemExit:
    pass
print("LOADED", sorted(m for m in ("wasmtime", "httpx", "pydantic_settings", "structlog",
                                   "rich", "starlette") if m in sys.modules))
"""


def test_help_imports_nothing_heavy() -> None:
    done = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True,
                          timeout=60, check=True)
    assert "LOADED []" in done.stdout
    for name in _COMMANDS:
        assert f"  {name} " in done.stdout


def test_every_listed_command_resolves() -> None:
    ctx = click.Context(main)
    for name in _COMMANDS:
        assert isinstance(main.get_command(ctx, name), click.Command), name


_ENTRY_PROBE = """
import runpy, sys
sys.argv = ["spearpy", sys.argv[1]]
try:
    runpy.run_module("spearpy", run_name="__main__")
except SystemExit:
    pass
print("LOADED", sorted(m for m in ("wasmtime", "httpx", "pydantic", "pydantic_settings",
                                   "structlog", "spearpy.config", "spearpy.host")
                       if m in sys.modules))
"""


def test_help_and_version_through_the_entry_point_import_nothing_heavy() -> None:
    # `python -m spearpy` as a user runs it: spearpy/__init__ and __main__ too.
    for flag, shows in (("--help", "Commands:"), ("--version", "version")):
        done = subprocess.run([sys.executable, "-c", _ENTRY_PROBE, flag], capture_output=True,
                              text=True, timeout=60, check=True)
        assert shows in done.stdout, (flag, done.stdout)
        assert "LOADED []" in done.stdout, (flag, done.stdout)


def test_the_version_is_the_installed_one() -> None:
    # `--version` reads spearpy.__version__ (no importlib.metadata at start-up);
    # pyproject.toml takes the package version from it, so they cannot drift.
    from importlib.metadata import version

    import spearpy

    done = subprocess.run([sys.executable, "-m", "spearpy", "--version"], capture_output=True,
                          text=True, timeout=60, check=True)
    assert spearpy.__version__ == version("spearpy")
    assert done.stdout.strip().endswith(f"version {version('spearpy')}")


_GC_PROBE = """
import atexit, gc, sys
import spearpy.cli.show
seen = []
# The command as it runs: is the collector on?
spearpy.cli.show.show.callback = lambda **_: seen.append(gc.isenabled())
atexit.register(lambda: print("DURING", seen, "FROZEN", gc.get_freeze_count() > 0))
sys.argv = ["spearpy", "show", "t.json"]
from spearpy.cli import main
main()
"""


def test_the_process_entry_pauses_the_collector_for_imports_and_teardown_only() -> None:
    # The `spearpy` process holds the collector off while the command's
    # module imports, then freezes what exists and collects again while the
    # command runs (a long run or serve must not pile up garbage), and freezes
    # everything at exit so teardown skips the collections (spearpy/cli/__init__.py).
    done = subprocess.run([sys.executable, "-c", _GC_PROBE], capture_output=True,
                          text=True, timeout=60, check=True)
    assert "DURING [True] FROZEN True" in done.stdout, done.stdout + done.stderr
    # Called with arguments (tests, CliRunner, an embedder), main() leaves the
    # caller's collector alone.
    before = gc.get_freeze_count()
    with contextlib.suppress(SystemExit):
        main(["--version"])
    assert gc.get_freeze_count() == before
