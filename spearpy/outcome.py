"""How a run ended, and the process exit code each ending maps to."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any


class Outcome(StrEnum):
    """How a run ended. A StrEnum: it compares equal to, and serialises as,
    its string, which RunResult.outcome has always been."""

    EXITED = "exited"
    TIMEOUT = "timeout"
    TOOL_TIMEOUT = "tool_timeout"  # ends one tool call, never a whole run
    CANCELLED = "cancelled"
    TRAP = "trap"
    FUEL_EXHAUSTED = "fuel_exhausted"
    LOG_LIMIT = "log_limit"
    MEMORY_LIMIT = "memory_limit"
    REPLAY_MISMATCH = "replay_mismatch"
    WORKER_LOST = "worker_lost"
    LOAD_ERROR = "load_error"
    HOST_ERROR = "host_error"


# Distinct exit codes so scripts can tell why a run ended without parsing
# text. 124 follows coreutils `timeout`, 130 the shell's SIGINT convention,
# 134 SIGABRT (a trapped guest is an aborted program); the rest sit in the
# unused 125-138 band. 65/70/75 are sysexits' EX_DATAERR / EX_SOFTWARE /
# EX_TEMPFAIL (a batch input whose worker process kept dying).
EXIT_CODES: dict[str, int] = {
    Outcome.TIMEOUT: 124,
    Outcome.CANCELLED: 130,
    Outcome.TRAP: 134,
    Outcome.FUEL_EXHAUSTED: 135,
    Outcome.LOG_LIMIT: 136,
    Outcome.MEMORY_LIMIT: 137,
    Outcome.REPLAY_MISMATCH: 138,
    Outcome.WORKER_LOST: 75,
    Outcome.LOAD_ERROR: 65,
    Outcome.HOST_ERROR: 70,
}


def exit_code_for(outcome: str) -> int:
    return EXIT_CODES.get(outcome, 70)


@dataclass(frozen=True, slots=True)
class RunResult:
    run_id: str
    exit_code: int
    outcome: str  # an Outcome (a str): "exited" or a key of EXIT_CODES
    message: str = ""
    stdout: bytes | None = None
    stderr: bytes | None = None
    usage: dict[str, int] = field(default_factory=dict)
    transcripts: list[dict[str, Any]] = field(default_factory=list)
    elapsed_ms: float = 0.0
    events: list[Any] = field(default_factory=list)
    # The guest's last log lines, [{"level", "text"}], oldest first (a bounded
    # ring: spearpy.logring); `logs_dropped` older ones did not fit.
    logs: list[dict[str, str]] = field(default_factory=list)
    logs_dropped: int = 0

    @classmethod
    def ended_as(cls, outcome: str, message: str) -> RunResult:
        """The end of a run the host ended for it (its worker died or was
        killed, its result was lost): no run id, no output, the outcome's exit code."""
        return cls(run_id="", exit_code=exit_code_for(outcome), outcome=str(outcome),
                   message=message)

    @property
    def ok(self) -> bool:
        return self.outcome == "exited" and self.exit_code == 0
