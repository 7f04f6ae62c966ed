"""Finding a compiler that can build wasm32 guests, and saying how to get one.

C: clang with Debian's wasi-libc (`--target=wasm32-wasi --sysroot=/usr`),
else zig's bundled clang (`python -m ziglang cc`). Rust: the first rustc whose
sysroot holds the wasm32 standard library, preferring `wasm32-wasip1` (the
name since Rust 1.78) over `wasm32-wasi` (the only one older compilers, such
as Debian's 1.63, have). A rustc only *knowing* a target is not enough: rustup
lists every target in `--print target-list` but installs the std of few.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from spearpy.errors import SpearpyError

RUST_TARGETS = ("wasm32-wasip1", "wasm32-wasi")
C_TARGET = "wasm32-wasi"
_DEFAULT_CLANG_MAJOR = 14  # Debian 12's clang; its runtime package carries the number
_PROBE_TIMEOUT_S = 60


class ToolchainMissing(SpearpyError):
    """No compiler for the job; the message says what was tried and `install`
    the commands that would fix it."""

    def __init__(self, what: str, tried: Sequence[str], install: Sequence[str]) -> None:
        self.what = what
        self.tried = list(tried)
        self.install = list(install)
        super().__init__(self.render())

    def render(self) -> str:
        lines = [f"no {self.what}"]
        lines += [f"  tried: {line}" for line in self.tried]
        if self.install:
            lines.append(f"install with: {self.install[0]}")
            lines += [f"          or: {cmd}" for cmd in self.install[1:]]
        return "\n".join(lines)


@dataclass(frozen=True, slots=True)
class CToolchain:
    argv: tuple[str, ...]  # the compiler with its target and sysroot flags
    label: str

    @property
    def is_zig(self) -> bool:
        return "ziglang" in self.argv


@dataclass(frozen=True, slots=True)
class RustToolchain:
    rustc: str
    target: str
    version: str
    cargo: str | None = field(default=None)


def _run(argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(list(argv), capture_output=True, text=True, check=False,
                              timeout=_PROBE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return subprocess.CompletedProcess(list(argv), 124, "", "timed out")


# ---- C ----------------------------------------------------------------------


def _clang_major(cc: str) -> int:
    try:
        out = _run([cc, "--version"]).stdout
    except OSError:
        return _DEFAULT_CLANG_MAJOR
    found = re.search(r"clang version (\d+)", out)
    return int(found.group(1)) if found else _DEFAULT_CLANG_MAJOR


def c_install_commands(major: int = _DEFAULT_CLANG_MAJOR) -> list[str]:
    return [f"apt-get install -y clang lld wasi-libc libclang-rt-{major}-dev-wasm32",
            "pip install ziglang"]


def _diagnose_clang(stderr: str, major: int) -> str:
    """The Debian package a failed probe build lacks, from clang's complaint."""
    if "wasm-ld" in stderr:
        return "wasm-ld is missing (package lld)"
    if "libclang_rt.builtins-wasm32" in stderr:
        return f"the wasm32 compiler runtime is missing (package libclang-rt-{major}-dev-wasm32)"
    if "stdio.h" in stderr or "crt1" in stderr or "-lc" in stderr:
        return "the WASI C library is missing (package wasi-libc)"
    last = [line for line in stderr.strip().splitlines() if line.strip()]
    return last[-1] if last else "the probe build failed"


def find_c(sysroot: str | None = None) -> CToolchain:
    """clang (or $WASM_CC) that builds a probe for wasm32-wasi, else zig cc.
    $WASM_CC names the one compiler to use: no zig fallback then."""
    sysroot = sysroot or os.environ.get("WASI_SYSROOT") or "/usr"
    chosen = os.environ.get("WASM_CC")
    cc = chosen or "clang"
    tried: list[str] = []
    major = _DEFAULT_CLANG_MAJOR
    with tempfile.TemporaryDirectory(prefix="spearpy-probe-") as tmp:
        probe = Path(tmp) / "probe.c"
        probe.write_text("#include <stdio.h>\nint main(void){puts(\"\");return 0;}\n")
        out = str(Path(tmp) / "probe.wasm")
        path = shutil.which(cc)
        if path is None:
            tried.append(f"{cc}: not installed")
        else:
            major = _clang_major(path)
            argv: tuple[str, ...] = (path, f"--target={C_TARGET}", f"--sysroot={sysroot}")
            done = _run([*argv, str(probe), "-o", out])
            if done.returncode == 0:
                return CToolchain(argv, f"clang {major} --target={C_TARGET}")
            tried.append(f"{path} --target={C_TARGET} --sysroot={sysroot}: "
                         f"{_diagnose_clang(done.stderr, major)}")
        if not chosen:
            argv = (sys.executable, "-m", "ziglang", "cc", f"--target={C_TARGET}")
            done = _run([*argv, str(probe), "-o", out])
            if done.returncode == 0:
                return CToolchain(argv, f"zig cc --target={C_TARGET}")
            tried.append("python -m ziglang cc: " + ("not installed" if "No module named"
                                                      in done.stderr else "probe build failed"))
    raise ToolchainMissing(f"C compiler for {C_TARGET} (clang with wasi-libc, or zig)", tried,
                           c_install_commands(major))


# ---- Rust --------------------------------------------------------------------


def _rustc_candidates() -> list[str]:
    """$RUSTC_WASM alone if set; else the rustc on PATH, then the distro's."""
    chosen = os.environ.get("RUSTC_WASM")
    if chosen:
        return [chosen]
    found = [p for p in (shutil.which("rustc"), "/usr/bin/rustc") if p]
    return list(dict.fromkeys(found))


def _installed_targets(rustc: str) -> tuple[str, list[str]] | None:
    """(version, the wasm32 targets whose std is installed), None if it won't run."""
    try:
        version = _run([rustc, "--version"])
        sysroot = _run([rustc, "--print", "sysroot"])
    except OSError:
        return None
    if version.returncode or sysroot.returncode:
        return None
    rustlib = Path(sysroot.stdout.strip()) / "lib" / "rustlib"
    have = [t for t in RUST_TARGETS if any((rustlib / t / "lib").glob("libstd-*.rlib"))]
    return version.stdout.strip(), have


def _knows(rustc: str, target: str) -> bool:
    try:
        return target in _run([rustc, "--print", "target-list"]).stdout.split()
    except OSError:
        return False


def rust_install_commands(with_cargo: bool, rustup_target: str = "wasm32-wasip1") -> list[str]:
    # Debian's rustc is 1.63 (wasm32-wasi); its cargo package matches it.
    debian = "apt-get install -y rustc libstd-rust-dev-wasm32" + (" cargo" if with_cargo else "")
    commands = [debian]
    if shutil.which("rustup"):
        commands.insert(0, f"rustup target add {rustup_target}")
    else:
        commands.append(f"rustup target add {rustup_target} (with rustup from https://rustup.rs)")
    return commands


def find_rust(targets: Sequence[str] = RUST_TARGETS, *, need_cargo: bool = False,
              candidates: Sequence[str] | None = None) -> RustToolchain:
    """The first rustc of `candidates` (default: $RUSTC_WASM, else the one on
    PATH, then /usr/bin/rustc) with the std of one of `targets`, in their
    order of preference; with `need_cargo`, only one with cargo beside it."""
    tried: list[str] = []
    rustup_target = "wasm32-wasip1"
    for rustc in candidates if candidates is not None else _rustc_candidates():
        found = _installed_targets(rustc)
        if found is None:
            tried.append(f"{rustc}: not installed")
            continue
        version, have = found
        usable = [t for t in targets if t in have]
        if not usable:
            where = f"{rustc} ({version})"
            tried.append(f"{where}: no wasm32 standard library installed "
                         f"(looked for {', '.join(targets)})")
            if rustc == shutil.which("rustc") and not _knows(rustc, "wasm32-wasip1"):
                rustup_target = "wasm32-wasi"  # a rustup toolchain older than 1.78
            continue
        cargo = _cargo_beside(rustc)
        if need_cargo and cargo is None:
            tried.append(f"{rustc} ({version}): has {usable[0]}, but no cargo beside it")
            continue
        return RustToolchain(rustc, usable[0], version, cargo)
    what = "Rust compiler with the wasm32 standard library" + (" and cargo" if need_cargo else "")
    raise ToolchainMissing(what, tried, rust_install_commands(need_cargo, rustup_target))


def _cargo_beside(rustc: str) -> str | None:
    """The cargo of the same installation: rustup's proxies sit together,
    and Debian's cargo matches Debian's rustc, which a newer cargo may not."""
    beside = Path(rustc).with_name("cargo")
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    return None
