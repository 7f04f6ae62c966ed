#!/usr/bin/env bash
# Prepare a fresh machine: a virtualenv in .venv with spearpy and its dev tools.
#
#   tools/setup.sh               Python side only (enough for `spearpy demo` and `spearpy run`)
#   tools/setup.sh --toolchains  also what only the tests need: the wasm32 toolchains
#                                (Debian: clang lld wasi-libc libclang-rt-14-dev-wasm32
#                                rustc libstd-rust-dev-wasm32 cargo, through apt-get), Debian's
#                                chromium for the service page's browser test (driven by
#                                Playwright, which downloads no browser), espeak-ng (the mic
#                                tests' speech WAVs), postgresql (the journal store tests
#                                start a server of their own), and the [ray] and [postgres]
#                                extras for the batch-on-Ray and journal tests
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"

TOOLCHAINS=0
for arg in "$@"; do
    case $arg in
        --toolchains) TOOLCHAINS=1 ;;
        *) echo "usage: tools/setup.sh [--toolchains]" >&2; exit 2 ;;
    esac
done

APT_PACKAGES=(clang lld wasi-libc libclang-rt-14-dev-wasm32 rustc libstd-rust-dev-wasm32 cargo
              chromium espeak-ng postgresql)

toolchains_present() {
    command -v clang >/dev/null && command -v wasm-ld >/dev/null \
        && [ -f /usr/lib/wasm32-wasi/libc.a ] && [ -x /usr/bin/rustc ] && [ -x /usr/bin/cargo ] \
        && [ -d /usr/lib/rustlib/wasm32-wasi ] && [ -d /usr/lib/rustlib/wasm32-unknown-unknown ] \
        && [ -x /usr/bin/chromium ] && command -v espeak-ng >/dev/null \
        && compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null
}

if [ $TOOLCHAINS = 1 ] && ! toolchains_present; then
    SUDO=""
    [ "$(id -u)" = 0 ] || SUDO="sudo"
    if ! command -v apt-get >/dev/null; then
        echo "setup: no apt-get here; install the equivalents of: ${APT_PACKAGES[*]}" >&2
        exit 3
    fi
    echo "setup: installing the test toolchains: ${APT_PACKAGES[*]}"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends \
        "${APT_PACKAGES[@]}" >/dev/null
fi

PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
    "$PYTHON" -m venv .venv
fi
EXTRAS="dev,otel"
[ $TOOLCHAINS = 1 ] && EXTRAS="$EXTRAS,ray,postgres"
.venv/bin/python -m pip install -q --disable-pip-version-check -e ".[$EXTRAS]"
# An editable install leaves spearpy's own modules uncompiled (pip compiles a
# regular install), and where PYTHONDONTWRITEBYTECODE is set Python never
# caches them either: every `spearpy run` would compile all of them again
# (~50 ms of a ~300 ms start). Python ignores a .pyc whose source changed.
.venv/bin/python -m compileall -q spearpy
