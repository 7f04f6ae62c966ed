#!/usr/bin/env bash
# Prepare a fresh machine: a virtualenv in .venv with spearpy.
#
#   tools/setup.sh               spearpy and its runtime dependencies only: enough for
#                                `spearpy demo` and `spearpy run` (the first run's set-up)
#   tools/setup.sh --dev         also the dev tools (pytest, pytest-xdist, ruff, mypy,
#                                Playwright, ...) and the [otel] extra: enough to run most tests
#   tools/setup.sh --toolchains  --dev, and also what only the whole suite needs (tools/test.sh
#                                runs this): the wasm32 toolchains
#                                (Debian: clang lld wasi-libc libclang-rt-14-dev-wasm32
#                                rustc libstd-rust-dev-wasm32 cargo, through apt-get), Debian's
#                                chromium for the service page's browser test (driven by
#                                Playwright, which downloads no browser), espeak-ng (the mic
#                                tests' speech WAVs), postgresql (the journal store tests
#                                start a server of their own), and the [ray] and [postgres]
#                                extras for the batch-on-Ray and journal tests
#
# Packages go in with uv (from PyPI, installed into .venv by this script: it
# downloads and installs in parallel; the runtime took 13 s with it and 39 s
# with pip on a 2-core machine); where uv cannot be had or fails, with pip.
# SPEARPY_INSTALLER=pip forces pip.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"

DEV=0
TOOLCHAINS=0
for arg in "$@"; do
    case $arg in
        --dev) DEV=1 ;;
        --toolchains) DEV=1; TOOLCHAINS=1 ;;
        *) echo "usage: tools/setup.sh [--dev] [--toolchains]" >&2; exit 2 ;;
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
PIP=(.venv/bin/python -m pip install -q --disable-pip-version-check)

# pip as ensurepip ships it, run straight from its wheel: ensurepip's own
# install of pip into a new venv is most of `python -m venv`'s ~7 s.
bundled_pip() {
    "$PYTHON" - <<'PY' 2>/dev/null
import ensurepip, glob, os
here = os.path.join(os.path.dirname(ensurepip.__file__), "_bundled")
found = (sorted(glob.glob(os.path.join(here, "pip-*.whl")))
         + sorted(glob.glob("/usr/share/python-wheels/pip-*.whl")))  # Debian keeps them here
print(found[0] if found else "")
PY
}

# uv into .venv (and pip through it, for whoever uses pip there later);
# fails quietly so that the caller falls back to pip.
get_uv() {
    [ "${SPEARPY_INSTALLER:-uv}" = uv ] || return 1
    [ -x .venv/bin/uv ] && return 0
    if [ -x .venv/bin/pip ]; then
        "${PIP[@]}" uv || return 1
    else
        local wheel
        wheel=$(bundled_pip)
        [ -n "$wheel" ] && .venv/bin/python "$wheel/pip" install -q --disable-pip-version-check uv \
            || return 1
        .venv/bin/uv pip install --python .venv/bin/python -q pip || return 1
    fi
}

if [ ! -x .venv/bin/python ]; then
    "$PYTHON" -m venv --without-pip .venv
fi
EXTRAS=""
[ $DEV = 1 ] && EXTRAS="dev,otel"
[ $TOOLCHAINS = 1 ] && EXTRAS="$EXTRAS,ray,postgres"
TARGET="."
[ -n "$EXTRAS" ] && TARGET=".[$EXTRAS]"
# --compile-bytecode: what pip does by default. Where PYTHONDONTWRITEBYTECODE
# is set nothing else ever writes the dependencies' .pyc, and every start
# would compile them again (a second on `spearpy demo`).
if get_uv && .venv/bin/uv pip install --python .venv/bin/python -q --compile-bytecode -e "$TARGET"; then
    :
else
    echo "setup: installing with pip (uv could not be had or failed)" >&2
    [ -x .venv/bin/pip ] || .venv/bin/python -m ensurepip --default-pip >/dev/null
    "${PIP[@]}" -e "$TARGET"
fi
# An editable install leaves spearpy's own modules uncompiled (pip compiles a
# regular install), and where PYTHONDONTWRITEBYTECODE is set Python never
# caches them either: every `spearpy run` would compile all of them again
# (~50 ms of a ~300 ms start). Python ignores a .pyc whose source changed.
.venv/bin/python -m compileall -q spearpy
