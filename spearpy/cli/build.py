"""`spearpy build`: compile a C or Rust guest to wasm32."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

import click


@click.command()
@click.argument("path", type=click.Path(), default=".")
@click.option("-o", "--out", "out", type=click.Path(dir_okay=False), default=None,
              help="where the .wasm goes [PROJECT/NAME.wasm, or beside the source file]")
@click.option("-v", "--verbose", is_flag=True, help="print the compiler commands")
def build(path: str, out: str | None, verbose: bool) -> None:
    """Build the guest at PATH (default: here) to a wasm32 module.

    PATH is a Cargo project (cargo build --release for wasm32-wasip1, or
    wasm32-wasi with an older Rust), a directory of .c files (clang for
    wasm32-wasi with wasi-libc, or zig cc), or one .c or .rs file (a .rs file
    using spear_guest gets the packaged crate linked in).

    Exit codes: 0 built, 1 the compiler failed, 2 nothing to build at PATH,
    3 no toolchain (the message says how to install one).
    """
    from spearpy.build import (
        EXIT_FAILED,
        EXIT_TOOLCHAIN_MISSING,
        EXIT_USAGE,
        BuildFailed,
        NothingToBuild,
        ToolchainMissing,
        build_path,
    )
    from spearpy.build.sdk import SdkMissing

    try:
        built = build_path(Path(path), Path(out) if out else None)
    except ToolchainMissing as exc:
        click.echo(f"spearpy build: {exc}", err=True)
        sys.exit(EXIT_TOOLCHAIN_MISSING)
    except (NothingToBuild, SdkMissing) as exc:
        click.echo(f"spearpy build: {exc}", err=True)
        sys.exit(EXIT_USAGE)
    except BuildFailed as exc:
        if exc.output:
            click.echo(exc.output.rstrip(), err=True)
        click.echo(f"spearpy build: {exc}", err=True)
        sys.exit(EXIT_FAILED)
    if verbose:
        for argv in built.commands:
            click.echo("  $ " + shlex.join(argv), err=True)
    size = built.wasm.stat().st_size
    click.echo(f"built {built.wasm} ({size:,} bytes; {built.language}, {built.toolchain})")
