"""Building the samples listed in wasm-samples/manifest.json (tools/build_wasm.sh).

Same compilers and flags as `spearpy build` (compile.py), with the Rust
toolchain pinned: the committed binaries are reproduced byte-for-byte only by
the compiler that made them, Debian's rustc for `wasm32-wasi`
($RUSTC_WASM overrides), whatever newer rustc is on PATH.

The manifest is read, never written, unless `update_manifest` is asked for.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from spearpy.build.compile import (
    BuildFailed,
    c_command,
    rust_bin_command,
    sdk_rlib_command,
)
from spearpy.build.sdk import stale_copies
from spearpy.build.toolchains import CToolchain, RustToolchain, find_c, find_rust

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_OUT = ROOT / "wasm-samples"
SAMPLES_RUST_TARGET = "wasm32-wasi"
CRATE = ROOT / "guest" / "rust" / "spear-guest"


@dataclass(frozen=True, slots=True)
class Sample:
    name: str
    source: Path
    wasm_name: str


def load_manifest(path: Path) -> tuple[list[dict[str, Any]], list[Sample]]:
    entries: list[dict[str, Any]] = json.loads(path.read_text(encoding="utf-8"))
    samples = [Sample(e["name"], ROOT / e["source"], os.path.basename(e["wasm"]))
               for e in entries]
    return entries, samples


def _run_logged(argv: list[str], log: Path) -> bool:
    import subprocess

    with log.open("w") as out:
        try:
            return subprocess.run(argv, stdout=out, stderr=subprocess.STDOUT,
                                  check=False).returncode == 0
        except OSError as exc:
            out.write(f"cannot run {argv[0]}: {exc}\n")
            return False


def build_samples(samples: list[Sample], build_dir: Path, tmp: Path, err: TextIO) -> bool:
    """Compile every sample into `build_dir`; False (failures on `err`) if any failed."""
    need_c = any(s.source.suffix == ".c" for s in samples)
    need_rust = any(s.source.suffix == ".rs" for s in samples)
    cc: CToolchain | None = find_c() if need_c else None
    rust: RustToolchain | None = None
    remaps = [f"{ROOT}=.", f"{tmp}=/build"]
    rlib = tmp / "libspear_guest.rlib"
    if need_rust:
        rust = find_rust((SAMPLES_RUST_TARGET,),
                         candidates=[os.environ.get("RUSTC_WASM") or "/usr/bin/rustc"])
        for argv in _crate_commands(rust, rlib, remaps, tmp):
            if not _run_logged(argv, tmp / "crate.log"):
                err.write("FAILED: the spear_guest crate\n" + (tmp / "crate.log").read_text())
                return False

    def one(sample: Sample) -> bool:
        out = build_dir / sample.wasm_name
        if sample.source.suffix == ".c" and cc is not None:
            argv = c_command(cc, [sample.source], out, prefix_root=ROOT)
        elif sample.source.suffix == ".rs" and rust is not None:
            argv = rust_bin_command(rust, sample.source, out, sample.name, rlib=rlib,
                                    remaps=remaps)
        else:
            (tmp / f"{sample.name}.log").write_text(f"unknown source type {sample.source}\n")
            return False
        return _run_logged(argv, tmp / f"{sample.name}.log")

    with ThreadPoolExecutor(os.cpu_count() or 2) as pool:
        results = list(pool.map(one, samples))
    for sample, ok in zip(samples, results, strict=True):
        if not ok:
            err.write(f"FAILED: {sample.name}\n" + (tmp / f"{sample.name}.log").read_text())
    return all(results)


def _crate_commands(rust: RustToolchain, rlib: Path, remaps: list[str],
                    tmp: Path) -> list[list[str]]:
    commands = [sdk_rlib_command(rust, CRATE, rlib, remaps)]
    # The crate must also build for hosts without WASI; it is not linked into any sample.
    unknown = "wasm32-unknown-unknown"
    if _has_std(rust.rustc, unknown):
        commands.append(sdk_rlib_command(rust, CRATE, tmp / "unknown.rmeta", remaps,
                                         target=unknown, emit_metadata=True))
    return commands


def _has_std(rustc: str, target: str) -> bool:
    import subprocess

    sysroot = subprocess.run([rustc, "--print", "sysroot"], capture_output=True, text=True,
                             check=False).stdout.strip()
    return any((Path(sysroot) / "lib" / "rustlib" / target / "lib").glob("libstd-*.rlib"))


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def compare(entries: list[dict[str, Any]], samples: list[Sample], fresh: Path,
            committed: Path) -> list[str]:
    """What differs between a fresh build and the committed binaries and hashes."""
    problems = []
    for entry, sample in zip(entries, samples, strict=True):
        new = (fresh / sample.wasm_name).read_bytes()
        path = committed / sample.wasm_name
        if not path.is_file():
            problems.append(f"DIFFERS: {sample.name}: {path} is missing")
        elif path.read_bytes() != new:
            problems.append(f"DIFFERS: {sample.name}: rebuilt binary differs from {path}")
        elif hashlib.sha256(new).hexdigest() != entry.get("sha256"):
            problems.append(f"DIFFERS: {sample.name}: manifest sha256 is stale")
    return problems


def update_manifest(entries: list[dict[str, Any]], samples: list[Sample], out: Path) -> Path:
    for entry, sample in zip(entries, samples, strict=True):
        path = out / sample.wasm_name
        entry["sha256"] = sha256(path)
        rel = os.path.relpath(path, ROOT)
        entry["wasm"] = str(path) if rel.startswith("..") else rel
    target = out / "manifest.json"
    target.write_text(json.dumps(entries, indent=2) + "\n", encoding="utf-8")
    return target


def run(out: Path, *, check: bool, update: bool, stdout: TextIO, stderr: TextIO) -> int:
    """tools/build_wasm.sh: 0 ok, 1 build failure or difference, 3 toolchain missing
    (ToolchainMissing propagates; the caller maps it)."""
    out.mkdir(parents=True, exist_ok=True)
    out = out.resolve()
    manifest = DEFAULT_OUT / "manifest.json"
    if out != DEFAULT_OUT and (out / "manifest.json").is_file():
        manifest = out / "manifest.json"
    entries, samples = load_manifest(manifest)
    with tempfile.TemporaryDirectory(prefix="spearpy-samples-") as tmp_name:
        tmp = Path(tmp_name)
        build_dir = tmp / "build" if check else out
        build_dir.mkdir(exist_ok=True)
        try:
            if not build_samples(samples, build_dir, tmp, stderr):
                return 1
        except BuildFailed as exc:
            stderr.write(f"{exc}\n{exc.output}")
            return 1
        if check:
            problems = compare(entries, samples, build_dir, out)
            problems += [f"DIFFERS: packaged SDK: {p} (python -m spearpy.build sync-sdk)"
                         for p in stale_copies()]
            for line in problems:
                stdout.write(line + "\n")
            n, bad = len(samples), sum(p.split(":")[1].strip() != "packaged SDK"
                                       for p in problems)
            stdout.write(f"{n - bad}/{n} samples reproduce byte-for-byte"
                         + ("" if problems else "; all good") + "\n")
            return 1 if problems else 0
    if update:
        written = update_manifest(entries, samples, out)
        stdout.write(f"built {len(samples)} samples into {out}; sha256s written to {written}\n")
        return 0
    stale = [s.name for e, s in zip(entries, samples, strict=True)
             if sha256(out / s.wasm_name) != e.get("sha256")]
    stdout.write(f"built {len(samples)} samples into {out}\n")
    if stale:
        stdout.write(f"sha256 differs from {manifest} for: {', '.join(stale)} "
                     "(--update-manifest records the new ones)\n")
    return 0
