"""How a run ended, and the process exit code each ending maps to."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# Distinct exit codes so scripts can tell why a run ended without parsing
# text. 124 follows coreutils `timeout`, 130 the shell's SIGINT convention,
# 134 SIGABRT (a trapped guest is an aborted program); the rest sit in the
# unused 125-138 band. 65/70/75 are sysexits' EX_DATAERR / EX_SOFTWARE /
# EX_TEMPFAIL (a batch input whose worker process kept dying).
EXIT_CODES: dict[str, int] = {
    "timeout": 124,
    "cancelled": 130,
    "trap": 134,
    "fuel_exhausted": 135,
    "log_limit": 136,
    "memory_limit": 137,
    "replay_mismatch": 138,
    "worker_lost": 75,
    "load_error": 65,
    "host_error": 70,
}


def exit_code_for(outcome: str) -> int:
    return EXIT_CODES.get(outcome, 70)


@dataclass(frozen=True, slots=True)
class RunResult:
    run_id: str
    exit_code: int
    outcome: str  # "exited" or a key of EXIT_CODES
    message: str = ""
    stdout: bytes | None = None
    stderr: bytes | None = None
    usage: dict[str, int] = field(default_factory=dict)
    transcripts: list[dict[str, Any]] = field(default_factory=list)
    elapsed_ms: float = 0.0
    events: list[Any] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.outcome == "exited" and self.exit_code == 0
