#!/usr/bin/env bash
# Install everything the tests need, then run the whole suite. Extra arguments go to pytest.
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
bash tools/setup.sh --toolchains || exit $?
# The published MCP filesystem server the MCP tests run (npm, project-local).
bash tools/setup_node.sh || exit $?
.venv/bin/python -m pytest "$@"
rc=$?
if [ $rc = 5 ]; then
    echo "test.sh: pytest collected no tests; that is a failure here" >&2
    exit 1
fi
exit $rc
