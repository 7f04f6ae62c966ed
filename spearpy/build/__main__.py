"""`python -m spearpy.build`:

    python -m spearpy.build [PATH] [-o OUT]     the same as `spearpy build`
    python -m spearpy.build samples [--out DIR] [--check] [--update-manifest]
    python -m spearpy.build sync-sdk            copy guest/'s SDK into the package data

`samples` is what tools/build_wasm.sh runs; see its header for the options.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from spearpy.build import EXIT_TOOLCHAIN_MISSING, ToolchainMissing


@click.command("samples")
@click.option("--out", "out_dir", type=click.Path(file_okay=False), default=None,
              help="build into DIR [wasm-samples/]")
@click.option("--check", is_flag=True,
              help="rebuild into a temp dir and name every binary that differs from the "
                   "committed one (or the --out DIR's); exit 1 if any")
@click.option("--update-manifest", is_flag=True,
              help="write the new sha256s into the manifest (of --out DIR, else "
                   "wasm-samples/manifest.json)")
def samples(out_dir: str | None, check: bool, update_manifest: bool) -> None:
    """Build every sample listed in wasm-samples/manifest.json."""
    from spearpy.build import samples as impl

    if check and update_manifest:
        raise click.UsageError("--check and --update-manifest exclude each other")
    out = Path(out_dir) if out_dir else impl.DEFAULT_OUT
    try:
        code = impl.run(out, check=check, update=update_manifest, stdout=sys.stdout,
                        stderr=sys.stderr)
    except ToolchainMissing as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(EXIT_TOOLCHAIN_MISSING)
    sys.exit(code)


def main(argv: list[str]) -> None:
    if argv[:1] == ["samples"]:
        samples.main(argv[1:], prog_name="python -m spearpy.build samples")
    elif argv[:1] == ["sync-sdk"]:
        from spearpy.build.sdk import sync_copies

        sync_copies()
        print("copied guest/c/spear.h and guest/rust/spear-guest/src into spearpy/data/sdk")
    else:
        from spearpy.cli.build import build

        build.main(argv, prog_name="python -m spearpy.build")


if __name__ == "__main__":
    main(sys.argv[1:])
