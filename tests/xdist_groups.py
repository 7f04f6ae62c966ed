"""Which tests share an xdist worker when tools/test.sh runs the suite across
cores (`-n logical --dist loadfile`).

Each file stays on one worker, as loadfile keeps it: its module-scoped
fixtures (servers, MCP servers, a Ray cluster) are then set up once, not once
per worker, and its tests keep their order. The files in ONE_WORKER also share
a single worker so that they never overlap each other: the attacks measured in
children under RLIMIT_DATA / RLIMIT_NOFILE (each child may take its whole
1 GiB) and the tests whose bounds are on wall time.

A scheduler, not `xdist_group` marks with --dist loadgroup: xdist 3.8 groups
by rewriting `item._nodeid`, which pytest 9 no longer reads, so the marks
would be ignored without a word.
"""
from __future__ import annotations

from typing import Any

import pytest

ONE_WORKER_SCOPE = "one_worker"
ONE_WORKER = frozenset({
    "test_hostile_limits.py",
    "test_host_bytes_churn.py",
    "test_audio_wav_bounds.py",
    "test_fd_exhaustion_host.py",
    "test_deadlines.py",
    "test_backends_wire_h1.py",
    "test_mcp_serve.py",
    "test_serve_durability.py",
})


def scope_of(nodeid: str) -> str:
    """The work unit a test goes to a worker in: its file, or ONE_WORKER_SCOPE."""
    path = nodeid.split("::", 1)[0]
    return ONE_WORKER_SCOPE if path.rsplit("/", 1)[-1] in ONE_WORKER else path


def make_scheduler(config: pytest.Config, log: Any) -> Any:
    """loadfile's scheduler with scope_of's scopes; None (xdist's own) for any other --dist."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling  # type: ignore[import-untyped]

    class _Scheduling(LoadFileScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            return scope_of(nodeid)

    return _Scheduling(config, log)
