"""Compiling one guest: a C file or directory, a single Rust file, a Cargo project.

The flags are the ones the committed samples are built with (tools/build_wasm.sh
goes through here too): `--export-table` so the host finds tools in the
funcref table, debug info stripped, and source paths remapped so a build does
not depend on where the project lives.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from spearpy.build.toolchains import CToolchain, RustToolchain, find_c, find_rust
from spearpy.errors import SpearpyError

C_FLAGS = ("-O2", "-Wall", "-Wextra", "-Wl,--export-table", "-Wl,--strip-debug")
RUST_FLAGS = ("--edition", "2021", "-C", "opt-level=s", "-C", "strip=debuginfo")
EXPORT_TABLE = "link-arg=--export-table"


class BuildFailed(SpearpyError):
    """The compiler ran and refused; its own output already went to stderr
    (or is in `output` when it was captured)."""

    def __init__(self, message: str, output: str = "") -> None:
        super().__init__(message)
        self.output = output


class NothingToBuild(SpearpyError, ValueError):
    """The path is not a guest this command knows how to build."""


@dataclass(frozen=True, slots=True)
class Built:
    wasm: Path
    language: str  # "c" or "rust"
    toolchain: str  # e.g. "clang 14 --target=wasm32-wasi"
    commands: tuple[tuple[str, ...], ...]


def _call(argv: Sequence[str], *, capture: bool, cwd: Path | None = None,
          env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(list(argv), cwd=cwd, env=env, text=True, check=False,
                              capture_output=capture)
    except OSError as exc:
        raise BuildFailed(f"cannot run {argv[0]}: {exc.strerror or exc}") from exc


def _checked(argv: Sequence[str], what: str, *, capture: bool, cwd: Path | None = None,
             env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    done = _call(argv, capture=capture, cwd=cwd, env=env)
    if done.returncode != 0:
        output = (done.stdout or "") + (done.stderr or "") if capture else ""
        raise BuildFailed(f"{what} failed (exit code {done.returncode})", output)
    return done


# ---- C -------------------------------------------------------------------------


def c_command(cc: CToolchain, sources: Sequence[Path], out: Path, *,
              prefix_root: Path | None = None) -> list[str]:
    remap = [f"-ffile-prefix-map={prefix_root}=."] if prefix_root is not None else []
    return [*cc.argv, *C_FLAGS[:3], *remap, *C_FLAGS[3:], "-o", str(out),
            *(str(s) for s in sources)]


def build_c(sources: Sequence[Path], out: Path, *, cc: CToolchain | None = None,
            prefix_root: Path | None = None, capture: bool = False) -> Built:
    cc = cc or find_c()
    argv = c_command(cc, sources, out, prefix_root=prefix_root)
    _checked(argv, "the C compiler", capture=capture)
    return Built(out, "c", cc.label, (tuple(argv),))


# ---- Rust, one file --------------------------------------------------------------


def sdk_rlib_command(rust: RustToolchain, crate_src: Path, out: Path,
                     remaps: Sequence[str] = (), target: str | None = None,
                     emit_metadata: bool = False) -> list[str]:
    argv = [rust.rustc, *RUST_FLAGS[:2], "--target", target or rust.target, *RUST_FLAGS[2:],
            *(f"--remap-path-prefix={r}" for r in remaps), "--crate-type", "rlib",
            "--crate-name", "spear_guest"]
    argv += ["--emit=metadata"] if emit_metadata else ["-C", "metadata=spear_guest"]
    return [*argv, "-o", str(out), str(crate_src / "src" / "lib.rs")]


def rust_bin_command(rust: RustToolchain, src: Path, out: Path, name: str, *,
                     rlib: Path | None, remaps: Sequence[str] = ()) -> list[str]:
    argv = [rust.rustc, *RUST_FLAGS[:2], "--target", rust.target, *RUST_FLAGS[2:],
            *(f"--remap-path-prefix={r}" for r in remaps), "--crate-type", "bin",
            "--crate-name", name, "-C", EXPORT_TABLE]
    if rlib is not None:
        argv += ["--extern", f"spear_guest={rlib}"]
    return [*argv, "-o", str(out), str(src)]


def crate_name(stem: str) -> str:
    name = "".join(ch if ch.isalnum() or ch == "_" else "_" for ch in stem)
    return name if name[:1].isalpha() else f"guest_{name}"


def build_rust_file(src: Path, out: Path, *, rust: RustToolchain | None = None,
                    capture: bool = False) -> Built:
    """One .rs file; the packaged spear_guest crate is compiled and linked
    when the file uses it."""
    from spearpy.build.sdk import rust_crate

    rust = rust or find_rust()
    uses_sdk = "spear_guest" in src.read_text(encoding="utf-8", errors="replace")
    commands: list[tuple[str, ...]] = []
    with tempfile.TemporaryDirectory(prefix="spearpy-build-") as tmp:
        remaps = [f"{src.parent.resolve()}=.", f"{tmp}=/build"]
        rlib = None
        if uses_sdk:
            rlib = Path(tmp) / "libspear_guest.rlib"
            crate = rust_crate()
            argv = sdk_rlib_command(rust, crate, rlib, [*remaps, f"{crate}=/spear-guest"])
            _checked(argv, "rustc (the spear_guest crate)", capture=capture)
            commands.append(tuple(argv))
        argv = rust_bin_command(rust, src, out, crate_name(src.stem), rlib=rlib, remaps=remaps)
        _checked(argv, "rustc", capture=capture)
        commands.append(tuple(argv))
    return Built(out, "rust", f"{rust.rustc} --target {rust.target}", tuple(commands))


# ---- Rust, a Cargo project ---------------------------------------------------------


def build_cargo(project: Path, out: Path | None, *, rust: RustToolchain | None = None) -> Built:
    """`cargo build --release` for the wasm32 target this machine has, run in
    the project (its .cargo/config.toml applies); the binary is copied to
    `out`, default PROJECT/<binary name>.wasm."""
    rust = rust or find_rust(need_cargo=True)
    assert rust.cargo is not None  # find_rust(need_cargo=True) guarantees it
    # The table export is what makes tools callable: added even when the
    # project's own config lacks it (a repeated flag is harmless to wasm-ld).
    flags = f'target.{rust.target}.rustflags=["-C", "{EXPORT_TABLE}"]'
    argv = [rust.cargo, "build", "--release", "--target", rust.target, "--config", flags,
            "--message-format=json-render-diagnostics"]
    # The cargo and rustc of one installation: a newer cargo on PATH may not
    # drive an older rustc, and rustup's cargo would pick its own rustc.
    env = {**os.environ, "RUSTC": rust.rustc}
    try:
        # stdout carries cargo's JSON messages; its progress and the compiler's
        # diagnostics go to stderr as they come.
        done = subprocess.run(argv, cwd=project, env=env, text=True, check=False,
                              stdout=subprocess.PIPE)
    except OSError as exc:
        raise BuildFailed(f"cannot run {rust.cargo}: {exc.strerror or exc}") from exc
    if done.returncode != 0:
        raise BuildFailed(f"cargo build failed (exit code {done.returncode})")
    binaries = _cargo_binaries(done.stdout)
    if not binaries:
        raise BuildFailed("cargo built no binary: the project needs a [[bin]] or src/main.rs")
    chosen = _pick_binary(binaries, project)
    target = out or project / f"{chosen.stem}.wasm"
    shutil.copyfile(chosen, target)
    return Built(target, "rust", f"cargo ({rust.version}) --target {rust.target}",
                 (tuple(argv),))


def _cargo_binaries(messages: str) -> list[Path]:
    found: list[Path] = []
    for line in messages.splitlines():
        try:
            message = json.loads(line)
        except json.JSONDecodeError:
            continue
        if message.get("reason") == "compiler-artifact" and message.get("executable"):
            found.append(Path(message["executable"]))
    return found


def _pick_binary(binaries: list[Path], project: Path) -> Path:
    if len(binaries) == 1:
        return binaries[0]
    named = [b for b in binaries if b.stem == project.resolve().name]
    if len(named) == 1:
        return named[0]
    names = ", ".join(sorted(b.name for b in binaries))
    raise BuildFailed(f"cargo built several binaries ({names}); build the one you want "
                      "with cargo directly, or give each its own project")


# ---- any path ----------------------------------------------------------------------


def build_path(path: Path, out: Path | None = None) -> Built:
    """Build whatever `path` is: a Cargo project, a directory of C files, or
    one .c / .rs file. Raises NothingToBuild, ToolchainMissing, BuildFailed."""
    if not path.exists():
        raise NothingToBuild(f"{path} does not exist")
    if path.is_dir() and (path / "Cargo.toml").is_file():
        return build_cargo(path, out)
    if path.is_dir():
        sources = sorted(path.glob("*.c"))
        if not sources:
            raise NothingToBuild(f"nothing to build in {path}: expected a Cargo.toml or .c "
                                 "files (spearpy new NAME --lang c|rust starts a project)")
        name = path.resolve().name
        return build_c(sources, out or path / f"{name}.wasm", prefix_root=path.resolve())
    if path.suffix == ".c":
        return build_c([path], out or path.with_suffix(".wasm"),
                       prefix_root=path.parent.resolve())
    if path.suffix == ".rs":
        return build_rust_file(path, out or path.with_suffix(".wasm"))
    raise NothingToBuild(f"cannot build {path}: give a project directory, a .c or a .rs file")
