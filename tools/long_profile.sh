#!/usr/bin/env bash
# The long reliability profile: at least 10^5 fuzzed hostcalls
# (SPEARPY_FUZZ_CALLS to change) and the full hostile-upstream fault matrix,
# plus the CI profiles of the hostile suites. Extra arguments go to pytest.
# CI runs a fixed-seed sample of the matrix in the default suite instead
# (tests/long_sample.py; docs/testing.md); SPEARPY_LONG=1 turns the sample
# off, so every item here is the `long` item it was.
# Record the summary it prints in docs/security.md when it changes.
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
started=$(date +%s)
SPEARPY_LONG=1 .venv/bin/python -m pytest -p no:cacheprovider -m "long or not long" -s -q \
    tests/test_fuzz_hostcalls.py tests/test_hostile_upstream.py tests/test_hostile_retry.py \
    tests/test_hostile_guest.py tests/test_hostile_tools.py \
    tests/test_secrets.py "$@"
rc=$?
echo "long_profile: exit $rc after $(( $(date +%s) - started )) s on $(nproc) cores," \
     "$(.venv/bin/python -c 'import importlib.metadata as m; print("wasmtime", m.version("wasmtime"))')," \
     "commit $(git rev-parse --short HEAD)"
exit $rc
