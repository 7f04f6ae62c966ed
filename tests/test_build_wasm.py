"""tools/build_wasm.sh: the committed samples rebuild byte-for-byte, and --check notices when not.

Needs the wasm toolchains (clang + wasi-libc, rustc with the wasm32-wasi std);
the tests skip, naming the install command, only when the script reports one
missing (exit 3). CI installs both.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "tools" / "build_wasm.sh"
MANIFEST: list[dict[str, Any]] = json.loads((ROOT / "wasm-samples/manifest.json").read_text())
TOOLCHAIN_MISSING = 3
# Only a guard against a hung compiler; no test asserts on time.
HANG_GUARD_S = 600


def build(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(["bash", str(SCRIPT), *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=HANG_GUARD_S, check=False, env={**os.environ, **(env or {})})
    if proc.returncode == TOOLCHAIN_MISSING and env is None:
        pytest.skip(f"wasm toolchain missing: {proc.stderr.strip()}")
    return proc


def small_workspace(tmp_path: Path, names: list[str]) -> Path:
    """An --out dir whose own manifest lists only `names` (fast to rebuild)."""
    out = tmp_path / "out"
    out.mkdir()
    subset = [s for s in MANIFEST if s["name"] in names]
    (out / "manifest.json").write_text(json.dumps(subset))
    return out


def test_committed_binaries_reproduce() -> None:
    proc = build("--check")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"{len(MANIFEST)}/{len(MANIFEST)} samples reproduce byte-for-byte" in proc.stdout


def test_build_into_another_dir_matches_the_committed_hashes(tmp_path: Path) -> None:
    out = small_workspace(tmp_path, ["c_hello", "rust_hello"])
    proc = build("--out", str(out))
    assert proc.returncode == 0, proc.stderr
    written = json.loads((out / "manifest.json").read_text())
    committed = {s["name"]: s["sha256"] for s in MANIFEST}
    for s in written:
        data = (out / Path(s["wasm"]).name).read_bytes()
        assert hashlib.sha256(data).hexdigest() == s["sha256"] == committed[s["name"]]


def test_check_names_a_tampered_binary(tmp_path: Path) -> None:
    out = small_workspace(tmp_path, ["c_tool_sum", "rust_tool_sum"])
    assert build("--out", str(out)).returncode == 0
    assert build("--check", "--out", str(out)).returncode == 0
    victim = out / "rust_tool_sum.wasm"
    data = bytearray(victim.read_bytes())
    data[-1] ^= 0xFF
    victim.write_bytes(bytes(data))
    proc = build("--check", "--out", str(out))
    assert proc.returncode == 1
    assert "DIFFERS: rust_tool_sum" in proc.stdout
    assert "c_tool_sum:" not in proc.stdout


def test_check_notices_a_stale_manifest_hash(tmp_path: Path) -> None:
    out = small_workspace(tmp_path, ["c_hello"])
    assert build("--out", str(out)).returncode == 0
    manifest = json.loads((out / "manifest.json").read_text())
    manifest[0]["sha256"] = "0" * 64
    (out / "manifest.json").write_text(json.dumps(manifest))
    proc = build("--check", "--out", str(out))
    assert proc.returncode == 1
    assert "DIFFERS: c_hello: manifest sha256 is stale" in proc.stdout


@pytest.mark.parametrize(
    ("sample", "env", "install"),
    [
        ("c_hello", {"WASM_CC": "/nonexistent/clang"},
         "apt-get install -y clang lld wasi-libc libclang-rt-14-dev-wasm32"),
        ("rust_hello", {"RUSTC_WASM": "/nonexistent/rustc"},
         "apt-get install -y rustc libstd-rust-dev-wasm32"),
    ],
)
def test_missing_toolchain_prints_the_install_command(
    tmp_path: Path, sample: str, env: dict[str, str], install: str
) -> None:
    out = small_workspace(tmp_path, [sample])
    proc = build("--out", str(out), env=env)
    assert proc.returncode == TOOLCHAIN_MISSING, proc.stdout + proc.stderr
    assert install in proc.stderr


CARGO = Path("/usr/bin/cargo")  # Debian's, matching /usr/bin/rustc; rustup's has no wasm32 std


def test_the_rust_crate_builds_its_examples_with_cargo(tmp_path: Path) -> None:
    """The Cargo path docs/guest-sdk.md describes: the crate's own .cargo/config.toml
    sets the target and --export-table, the sample runs its scripted conversation."""
    if not CARGO.exists():
        pytest.skip("cargo missing: bash tools/setup.sh --toolchains installs it")
    crate = ROOT / "guest/rust/spear-guest"
    env = {**os.environ, "RUSTC": "/usr/bin/rustc", "CARGO_HOME": str(tmp_path / "cargo-home"),
           "CARGO_TARGET_DIR": str(tmp_path / "target")}
    proc = subprocess.run([str(CARGO), "build", "--offline", "--release", "--example", "tool_sum"],
                          cwd=crate, env=env, capture_output=True, text=True,
                          timeout=HANG_GUARD_S, check=False)
    assert proc.returncode == 0, proc.stderr
    wasm = tmp_path / "target/wasm32-wasi/release/examples/tool_sum.wasm"
    sample = next(s for s in MANIFEST if s["name"] == "rust_tool_sum")
    run = subprocess.run(
        [sys.executable, "-m", "spearpy", "run", "--quiet", "--backend",
         f"scripted:{ROOT / sample['script']}", str(wasm)],
        capture_output=True, text=True, timeout=HANG_GUARD_S, check=False)
    assert run.returncode == sample["expect_exit"], run.stderr
    assert run.stdout.splitlines() == sample["expect_stdout"]
