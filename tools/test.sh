#!/usr/bin/env bash
# Install everything the tests need, then run the whole suite. Extra arguments go to pytest.
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
bash tools/setup.sh --toolchains || exit $?
# The published MCP filesystem server the MCP tests run (npm, project-local).
bash tools/setup_node.sh || exit $?
# Across every core (xdist; PYTEST_XDIST_AUTO_NUM_WORKERS=N to choose, `-n 0`
# among the arguments for one process). Here, not in pyproject's addopts: a
# developer's one-file run starts no workers. loadfile: a file's module-scoped
# fixtures (servers, a Ray cluster) are set up once, on its one worker; the
# tests that must not overlap share one worker too (tests/xdist_groups.py).
.venv/bin/python -m pytest -n logical --dist loadfile "$@"
rc=$?
if [ $rc = 5 ]; then
    echo "test.sh: pytest collected no tests; that is a failure here" >&2
    exit 1
fi
exit $rc
