"""`spearpy new` and `spearpy build` without a full newcomer run: names,
toolchain choice (faked compilers), the messages of a missing toolchain, the
packaged SDK matching guest/, and tools/build_wasm.sh leaving the manifest alone."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from spearpy.build import sdk
from spearpy.build.toolchains import ToolchainMissing, find_rust
from spearpy.scaffold import ScaffoldError, create

ROOT = Path(__file__).resolve().parents[1]
HANG_GUARD_S = 600


def spearpy(*args: str, cwd: Path, env: dict[str, str] | None = None,
            ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "spearpy", *args], cwd=cwd, text=True,
                          capture_output=True, timeout=HANG_GUARD_S, check=False,
                          env={**os.environ, **(env or {})})


def fake_rustc(tmp_path: Path, targets: list[str]) -> str:
    """A `rustc` whose sysroot holds the std of `targets` and nothing else."""
    sysroot = tmp_path / "sysroot"
    for target in targets:
        lib = sysroot / "lib" / "rustlib" / target / "lib"
        lib.mkdir(parents=True)
        (lib / "libstd-0123.rlib").write_bytes(b"")
    rustc = tmp_path / "bin" / "rustc"
    rustc.parent.mkdir(parents=True)
    rustc.write_text(f"""#!/bin/sh
case "$*" in
  --version) echo "rustc 9.99.0 (fake)";;
  "--print sysroot") echo "{sysroot}";;
  "--print target-list") echo wasm32-wasi; echo wasm32-wasip1;;
  *) exit 1;;
esac
""")
    rustc.chmod(rustc.stat().st_mode | stat.S_IXUSR)
    return str(rustc)


@pytest.mark.parametrize(("installed", "chosen"), [
    (["wasm32-wasi", "wasm32-wasip1"], "wasm32-wasip1"),
    (["wasm32-wasi"], "wasm32-wasi"),
    (["wasm32-wasip1"], "wasm32-wasip1"),
])
def test_rust_prefers_wasip1_and_falls_back_to_wasi(tmp_path: Path, installed: list[str],
                                                    chosen: str) -> None:
    found = find_rust(candidates=[fake_rustc(tmp_path, installed)])
    assert found.target == chosen
    assert found.version == "rustc 9.99.0 (fake)"


def test_a_rustc_without_the_wasm_std_is_passed_over(tmp_path: Path) -> None:
    bare = fake_rustc(tmp_path / "a", [])
    good = fake_rustc(tmp_path / "b", ["wasm32-wasi"])
    assert find_rust(candidates=[bare, good]).rustc == good
    with pytest.raises(ToolchainMissing) as caught:
        find_rust(candidates=[bare, str(tmp_path / "missing")])
    message = str(caught.value)
    assert f"{bare} (rustc 9.99.0 (fake)): no wasm32 standard library" in message
    assert f"{tmp_path / 'missing'}: not installed" in message
    assert "apt-get install -y rustc libstd-rust-dev-wasm32" in message


def test_cargo_is_needed_beside_the_chosen_rustc(tmp_path: Path) -> None:
    rustc = fake_rustc(tmp_path, ["wasm32-wasip1"])
    with pytest.raises(ToolchainMissing, match="no cargo beside it"):
        find_rust(candidates=[rustc], need_cargo=True)
    cargo = Path(rustc).with_name("cargo")
    cargo.write_text("#!/bin/sh\n")
    cargo.chmod(0o755)
    assert find_rust(candidates=[rustc], need_cargo=True).cargo == str(cargo)


@pytest.mark.parametrize(("lang", "env", "install"), [
    ("c", {"WASM_CC": "/nonexistent/clang"},
     "apt-get install -y clang lld wasi-libc libclang-rt-14-dev-wasm32"),
    ("rust", {"RUSTC_WASM": "/nonexistent/rustc"},
     "apt-get install -y rustc libstd-rust-dev-wasm32 cargo"),
])
def test_build_without_a_toolchain_exits_3_naming_the_install(
        tmp_path: Path, lang: str, env: dict[str, str], install: str) -> None:
    create("agent", lang, parent=tmp_path)
    done = spearpy("build", "agent", cwd=tmp_path, env=env)
    assert done.returncode == 3, done.stdout + done.stderr
    assert install in done.stderr
    assert "/nonexistent/" in done.stderr  # what was tried
    assert not (tmp_path / "agent" / "agent.wasm").exists()


def test_build_of_nothing_buildable_exits_2(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("hi")
    done = spearpy("build", str(tmp_path), cwd=tmp_path)
    assert done.returncode == 2
    assert "expected a Cargo.toml or .c files" in done.stderr
    assert spearpy("build", "missing.c", cwd=tmp_path).returncode == 2


def test_a_c_compile_error_exits_1(tmp_path: Path) -> None:
    (tmp_path / "bad.c").write_text("int main(void) { return nope; }\n")
    done = spearpy("build", "bad.c", cwd=tmp_path)
    if done.returncode == 3:
        pytest.skip(f"C toolchain missing: {done.stderr.strip()}")
    assert done.returncode == 1, done.stderr
    assert "nope" in done.stderr and "the C compiler failed" in done.stderr


@pytest.mark.parametrize(("name", "tool", "problem"), [
    ("1abc", "t", "project name"), ("a b", "t", "project name"), ("fn", "t", "reserved"),
    ("ok", "bad-name", "tool name"), ("ok", "main", "reserved"), ("ok", "sp_send", "reserved"),
    ("ok", "x" * 60, "tool name"),
])
def test_new_refuses_names_that_would_not_build(tmp_path: Path, name: str, tool: str,
                                                problem: str) -> None:
    with pytest.raises(ScaffoldError, match=problem):
        create(name, "c", tool=tool, parent=tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_new_does_not_overwrite(tmp_path: Path) -> None:
    (tmp_path / "agent").mkdir()
    (tmp_path / "agent" / "mine.c").write_text("")
    done = spearpy("new", "agent", "--lang", "rust", cwd=tmp_path)
    assert done.returncode == 2
    assert "already exists and is not empty" in done.stderr
    assert [p.name for p in (tmp_path / "agent").iterdir()] == ["mine.c"]


def test_new_projects_carry_the_packaged_sdk(tmp_path: Path) -> None:
    c_dir, _ = create("cagent", "c", tool="shout", parent=tmp_path)
    assert (c_dir / "spear.h").read_bytes() == (ROOT / "guest/c/spear.h").read_bytes()
    source = (c_dir / "agent.c").read_text()
    assert "SP_TOOL(shout_tool, shout)" in source and "{{" not in source
    script = json.loads((c_dir / "script.json").read_text())
    assert script["rules"][0]["reply"]["tool_calls"][0]["name"] == "shout"
    assert "{{last_tool}}" in script["default"]["content"]  # the script's own placeholder
    r_dir, files = create("ragent", "rust", parent=tmp_path)
    vendored = r_dir / "vendor/spear-guest/src"
    for path in (ROOT / "guest/rust/spear-guest/src").glob("*.rs"):
        assert (vendored / path.name).read_bytes() == path.read_bytes()
    assert (r_dir / ".cargo/config.toml").is_file() and (r_dir / ".gitignore").is_file()
    assert 'name = "ragent"' in (r_dir / "Cargo.toml").read_text()
    assert all(p.is_file() for p in files)


def test_the_packaged_sdk_equals_guest_sources(tmp_path: Path) -> None:
    assert sdk.stale_copies() == [], "run: python -m spearpy.build sync-sdk"
    # ... and the comparison notices a drifted copy.
    guest = tmp_path / "guest"
    (guest / "c").mkdir(parents=True)
    (guest / "c" / "spear.h").write_text("/* edited */\n")
    (guest / "rust" / "spear-guest").mkdir(parents=True)
    (guest / "rust" / "spear-guest" / "src").symlink_to(ROOT / "guest/rust/spear-guest/src")
    assert sdk.stale_copies(guest) == ["spearpy/data/sdk/c/spear.h differs from guest/c/spear.h"]


def test_build_wasm_leaves_the_manifest_alone_unless_asked(tmp_path: Path) -> None:
    manifest = json.loads((ROOT / "wasm-samples/manifest.json").read_text())
    subset = [dict(s, sha256="0" * 64) for s in manifest if s["name"] == "c_hello"]
    out = tmp_path / "out"
    out.mkdir()
    (out / "manifest.json").write_text(json.dumps(subset))
    before = (out / "manifest.json").read_bytes()
    done = subprocess.run(["bash", str(ROOT / "tools/build_wasm.sh"), "--out", "out"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=HANG_GUARD_S,
                          check=False)
    if done.returncode == 3:
        pytest.skip(f"C toolchain missing: {done.stderr.strip()}")
    assert done.returncode == 0, done.stderr
    assert (out / "manifest.json").read_bytes() == before
    assert "sha256 differs" in done.stdout and "c_hello" in done.stdout
    done = subprocess.run(["bash", str(ROOT / "tools/build_wasm.sh"), "--out", str(out),
                           "--update-manifest"], capture_output=True, text=True,
                          timeout=HANG_GUARD_S, check=False)
    assert done.returncode == 0, done.stderr
    written = json.loads((out / "manifest.json").read_text())
    assert written[0]["sha256"] == next(s["sha256"] for s in manifest if s["name"] == "c_hello")
