#!/usr/bin/env bash
# Build every guest sample listed in wasm-samples/manifest.json.
#
#   tools/build_wasm.sh                    build into wasm-samples/ and say which binaries
#                                          no longer match the manifest's sha256s
#   tools/build_wasm.sh --update-manifest  the same, and write the new sha256s into it
#   tools/build_wasm.sh --out DIR          build into DIR (DIR/manifest.json, if there, is
#                                          the list; --update-manifest writes DIR's)
#   tools/build_wasm.sh --check            rebuild into a temp dir and list every sample whose
#                                          binary in wasm-samples/ (or --out DIR) differs, and
#                                          any packaged SDK file (spearpy/data/sdk) that differs
#                                          from guest/; exit 1 if any
#
# Environment: WASM_CC (a clang to use; no zig fallback then), WASI_SYSROOT [/usr],
# RUSTC_WASM [/usr/bin/rustc].
#
# This is `python -m spearpy.build samples`: the compilers and flags of
# `spearpy build`, with the Rust compiler pinned (the committed binaries come
# from Debian's rustc 1.63 for wasm32-wasi). Source paths are remapped, so a
# build is byte-for-byte reproducible with the same compiler versions.
#
# Exit: 0 ok, 1 build failure or --check difference, 2 usage, 3 toolchain missing.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
if [ -x "$ROOT/.venv/bin/python" ]; then PY=$ROOT/.venv/bin/python; else PY=${PYTHON:-python3}; fi
case ${1:-} in
    -h|--help) sed -n '2,23p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
esac
# Not cd'ing: a relative --out DIR is relative to where the script was run.
export PYTHONPATH=$ROOT${PYTHONPATH:+:$PYTHONPATH}
exec "$PY" -m spearpy.build samples "$@"
