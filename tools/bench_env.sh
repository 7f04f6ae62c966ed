#!/usr/bin/env bash
# Create the benchmark environment: bench/.venv with spearpy (editable) plus the
# peers the suite compares against (Extism, LangGraph, LangChain, OpenAI Agents
# SDK). The peers live only here, never in the project's own dependencies.
#
#   tools/bench_env.sh            create or update bench/.venv
#   bench/.venv/bin/python -m bench [--quick]
#
# A peer that cannot be installed is reported and skipped: the suite then shows
# every other ratio and marks that peer's rows "unavailable".
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"

PYTHON=${PYTHON:-python3}
VENV=bench/.venv
# Pinned so two runs months apart measure the same peers; py-spy records the
# flame graphs of `python -m bench --profile`.
PEERS=(
    "extism==1.1.1"
    "langgraph==1.2.12"
    "langchain==1.4.2"
    "langchain-core==1.6.5"
    "openai-agents==0.24.0"
    "py-spy==0.4.3"
)

if [ ! -x "$VENV/bin/python" ]; then
    "$PYTHON" -m venv "$VENV" || exit 1
fi
PIP=("$VENV/bin/python" -m pip install -q --disable-pip-version-check)
"${PIP[@]}" -e . || { echo "bench_env: cannot install spearpy itself" >&2; exit 1; }

missing=()
for peer in "${PEERS[@]}"; do
    if ! "${PIP[@]}" "$peer"; then
        missing+=("$peer")
    fi
done
if [ ${#missing[@]} -gt 0 ]; then
    echo "bench_env: could not install: ${missing[*]} (their rows will read 'unavailable')" >&2
fi
echo "bench_env: ready: $VENV/bin/python -m bench"
