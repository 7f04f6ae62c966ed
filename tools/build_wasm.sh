#!/usr/bin/env bash
# Build every guest sample listed in wasm-samples/manifest.json.
#
#   tools/build_wasm.sh            build into wasm-samples/, refresh the manifest's sha256s
#   tools/build_wasm.sh --out DIR  build into DIR (DIR/manifest.json gets the sha256s)
#   tools/build_wasm.sh --check    rebuild into a temp dir and list every sample whose
#                                  binary in wasm-samples/ (or --out DIR) differs; exit 1 if any
#
# Environment: WASM_CC (a clang to use; no zig fallback then), WASI_SYSROOT [/usr],
# RUSTC_WASM [/usr/bin/rustc].
#
# The manifest is the list of samples: add an entry (name, source, wasm, ...) and run
# this script. The toolchain follows the source: .c -> clang (or zig cc), .rs -> rustc.
# Flags are fixed and source paths are remapped, so a build is byte-for-byte
# reproducible with the same compiler versions.
#
# Exit: 0 ok, 1 build failure or --check difference, 2 usage, 3 toolchain missing.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DEFAULT_OUT=$ROOT/wasm-samples
OUT=$DEFAULT_OUT
CHECK=0

usage() { sed -n '2,17p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }

while [ $# -gt 0 ]; do
    case $1 in
        --check) CHECK=1 ;;
        --out) [ $# -ge 2 ] || { usage >&2; exit 2; }; OUT=$2; shift ;;
        --out=*) OUT=${1#--out=} ;;
        -h|--help) usage; exit 0 ;;
        *) echo "unknown argument: $1" >&2; usage >&2; exit 2 ;;
    esac
    shift
done
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)

if [ -x "$ROOT/.venv/bin/python" ]; then PY=$ROOT/.venv/bin/python; else PY=${PYTHON:-python3}; fi
MANIFEST=$DEFAULT_OUT/manifest.json
[ "$OUT" != "$DEFAULT_OUT" ] && [ -f "$OUT/manifest.json" ] && MANIFEST=$OUT/manifest.json

TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
if [ $CHECK = 1 ]; then BUILD=$TMP/build; mkdir -p "$BUILD"; else BUILD=$OUT; fi

# name <TAB> source <TAB> wasm file name, one sample a line.
"$PY" - "$MANIFEST" >"$TMP/samples.tsv" <<'PYEOF'
import json, os, sys
for s in json.load(open(sys.argv[1])):
    print(s["name"], s["source"], os.path.basename(s["wasm"]), sep="\t")
PYEOF

need_c=0; need_rust=0
grep -q $'\t.*\\.c\t' "$TMP/samples.tsv" && need_c=1
grep -q $'\t.*\\.rs\t' "$TMP/samples.tsv" && need_rust=1

# ---- toolchains ----------------------------------------------------------------
CC_CMD=()
detect_c() {
    local sysroot=${WASI_SYSROOT:-/usr} cc=${WASM_CC:-clang}
    printf 'int main(void){return 0;}\n' >"$TMP/probe.c"
    if command -v "$cc" >/dev/null &&
        "$cc" --target=wasm32-wasi --sysroot="$sysroot" "$TMP/probe.c" -o "$TMP/probe.wasm" 2>/dev/null; then
        CC_CMD=("$cc" --target=wasm32-wasi "--sysroot=$sysroot")
    elif [ -z "${WASM_CC:-}" ] && "$PY" -m ziglang cc --target=wasm32-wasi "$TMP/probe.c" -o "$TMP/probe.wasm" 2>/dev/null; then
        # zig's bundled wasi-libc differs from Debian's: its binaries won't match the committed ones.
        CC_CMD=("$PY" -m ziglang cc --target=wasm32-wasi)
    else
        echo "error: no C compiler for wasm32-wasi (clang with wasi-libc, or zig)." >&2
        echo "install with: apt-get install -y clang lld wasi-libc libclang-rt-14-dev-wasm32" >&2
        echo "          or: pip install ziglang" >&2
        exit 3
    fi
}

RUSTC=${RUSTC_WASM:-/usr/bin/rustc}
detect_rust() {
    # Not the rustup rustc on PATH: it usually lacks the wasm32 std.
    local sysroot
    if [ -x "$RUSTC" ] && sysroot=$("$RUSTC" --print sysroot 2>/dev/null) &&
        compgen -G "$sysroot/lib/rustlib/wasm32-wasi/lib/libstd-*.rlib" >/dev/null; then
        return
    fi
    echo "error: no rustc with the wasm32-wasi standard library at $RUSTC (set RUSTC_WASM to override)." >&2
    echo "install with: apt-get install -y rustc libstd-rust-dev-wasm32" >&2
    exit 3
}

[ $need_c = 1 ] && detect_c
[ $need_rust = 1 ] && detect_rust

CFLAGS=(-O2 -Wall -Wextra "-ffile-prefix-map=$ROOT=." -Wl,--export-table -Wl,--strip-debug)
RUSTFLAGS=(--edition 2021 --target wasm32-wasi -C opt-level=s -C strip=debuginfo
    "--remap-path-prefix=$ROOT=." "--remap-path-prefix=$TMP=/build")

# ---- the Rust crate, once ------------------------------------------------------
CRATE=$ROOT/guest/rust/spear-guest/src/lib.rs
if [ $need_rust = 1 ]; then
    "$RUSTC" "${RUSTFLAGS[@]}" --crate-type rlib --crate-name spear_guest -C metadata=spear_guest \
        -o "$TMP/libspear_guest.rlib" "$CRATE"
    # The crate must also build for hosts without WASI; it is not linked into any sample.
    if compgen -G "$("$RUSTC" --print sysroot)/lib/rustlib/wasm32-unknown-unknown/lib/libstd-*.rlib" >/dev/null; then
        "$RUSTC" "${RUSTFLAGS[@]/wasm32-wasi/wasm32-unknown-unknown}" --crate-type rlib \
            --crate-name spear_guest --emit=metadata -o "$TMP/unknown.rmeta" "$CRATE"
    fi
fi

# ---- samples, in parallel --------------------------------------------------------
build_one() {
    local name=$1 src=$ROOT/$2 out=$BUILD/$3 log=$TMP/$1.log
    case $src in
        *.c) "${CC_CMD[@]}" "${CFLAGS[@]}" -o "$out" "$src" ;;
        *.rs) "$RUSTC" "${RUSTFLAGS[@]}" --crate-type bin --crate-name "$name" \
            -C link-arg=--export-table --extern "spear_guest=$TMP/libspear_guest.rlib" \
            -o "$out" "$src" ;;
        *) echo "$name: unknown source type $src" ;;
    esac >"$log" 2>&1 || { echo "$name" >>"$TMP/failed"; }
}

jobs_max=$(nproc 2>/dev/null || echo 2)
while IFS=$'\t' read -r name src wasm; do
    while [ "$(jobs -rp | wc -l)" -ge "$jobs_max" ]; do wait -n || true; done
    build_one "$name" "$src" "$wasm" &
done <"$TMP/samples.tsv"
wait

if [ -f "$TMP/failed" ]; then
    while read -r name; do
        echo "FAILED: $name" >&2
        cat "$TMP/$name.log" >&2
    done <"$TMP/failed"
    exit 1
fi

# ---- check, or record the new hashes ---------------------------------------------
if [ $CHECK = 1 ]; then
    "$PY" - "$MANIFEST" "$BUILD" "$OUT" <<'PYEOF'
import hashlib, json, os, sys
manifest, fresh, committed = sys.argv[1:]
bad = 0
for s in json.load(open(manifest)):
    name = os.path.basename(s["wasm"])
    new = open(os.path.join(fresh, name), "rb").read()
    path = os.path.join(committed, name)
    old = open(path, "rb").read() if os.path.exists(path) else None
    if old is None:
        print(f"DIFFERS: {s['name']}: {path} is missing"); bad += 1
    elif old != new:
        print(f"DIFFERS: {s['name']}: rebuilt binary differs from {path}"); bad += 1
    elif hashlib.sha256(old).hexdigest() != s.get("sha256"):
        print(f"DIFFERS: {s['name']}: manifest sha256 is stale"); bad += 1
n = len(json.load(open(manifest)))
print(f"{n - bad}/{n} samples reproduce byte-for-byte" + ("" if bad else "; all good"))
sys.exit(1 if bad else 0)
PYEOF
else
    "$PY" - "$MANIFEST" "$OUT" "$ROOT" <<'PYEOF'
import hashlib, json, os, sys
manifest, out, root = sys.argv[1:]
samples = json.load(open(manifest))
for s in samples:
    path = os.path.join(out, os.path.basename(s["wasm"]))
    s["sha256"] = hashlib.sha256(open(path, "rb").read()).hexdigest()
    rel = os.path.relpath(path, root)
    s["wasm"] = path if rel.startswith("..") else rel
with open(os.path.join(out, "manifest.json"), "w") as f:
    json.dump(samples, f, indent=2)
    f.write("\n")
print(f"built {len(samples)} samples into {out}")
PYEOF
fi
