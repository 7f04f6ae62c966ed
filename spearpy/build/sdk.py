"""The guest SDKs as installed with spearpy (package data), and their sources
in a checkout (guest/), which the packaged copies must equal.

`spearpy new` copies the header and the crate out of the package, so a
project builds on a machine that has spearpy installed and no checkout.
"""

from __future__ import annotations

import filecmp
import shutil
from pathlib import Path

from spearpy.errors import SpearpyError

_PACKAGE = Path(__file__).resolve().parents[1]
SDK_ROOT = _PACKAGE / "data" / "sdk"
# A checkout: spearpy/ next to guest/. Absent in an installed wheel.
CHECKOUT_GUEST = _PACKAGE.parent / "guest"

# packaged path (under SDK_ROOT) -> source path (under guest/)
_PAIRS = {"c/spear.h": "c/spear.h", "rust/spear-guest/src": "rust/spear-guest/src"}


class SdkMissing(SpearpyError, RuntimeError):
    """The package was installed without its data files."""


def c_header() -> Path:
    return _existing(SDK_ROOT / "c" / "spear.h")


def rust_crate() -> Path:
    """The packaged crate directory (holding src/lib.rs)."""
    crate = SDK_ROOT / "rust" / "spear-guest"
    _existing(crate / "src" / "lib.rs")
    return crate


def _existing(path: Path) -> Path:
    if not path.is_file():
        raise SdkMissing(f"{path} is missing: this spearpy was installed without its guest SDK "
                         "data files (reinstall it; from a checkout: pip install -e .)")
    return path


def _tree(root: Path) -> dict[str, Path]:
    """Files under `root` by relative path ("." for `root` itself being a file)."""
    if root.is_file():
        return {".": root}
    return {str(p.relative_to(root)): p for p in sorted(root.rglob("*")) if p.is_file()}


def stale_copies(guest: Path = CHECKOUT_GUEST) -> list[str]:
    """Packaged SDK files that differ from guest/'s, are missing, or are extra;
    empty when the copies are exact or there is no checkout to compare with."""
    if not guest.is_dir():
        return []
    problems = []
    for packaged, source in _PAIRS.items():
        want, have = _tree(guest / source), _tree(SDK_ROOT / packaged)
        for rel in sorted(want.keys() | have.keys()):
            name = f"spearpy/data/sdk/{packaged}" + ("" if rel == "." else f"/{rel}")
            if rel not in have:
                problems.append(f"{name} is missing")
            elif rel not in want:
                problems.append(f"{name} is not in guest/{source}")
            elif not filecmp.cmp(want[rel], have[rel], shallow=False):
                problems.append(f"{name} differs from guest/{source}")
    return problems


def sync_copies(guest: Path = CHECKOUT_GUEST) -> None:
    """Replace the packaged SDK with guest/'s (a checkout's maintainer step)."""
    for packaged, source in _PAIRS.items():
        src, dst = guest / source, SDK_ROOT / packaged
        if src.is_file():
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, dst)
        else:
            shutil.rmtree(dst, ignore_errors=True)
            shutil.copytree(src, dst)
