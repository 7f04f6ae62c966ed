"""What the operator decides about a service: where modules and state live,
who may call it, how many runs at once, and what a request may override."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from spearpy.config import HostConfig
from spearpy.executors.watch import GRACE_S, SILENCE_S, check_bound
from spearpy.web.guard import check_token

TOKEN_ENV = "SPEARPY_SERVE_TOKEN"
DEFAULT_PORT = 8700
EXECUTORS = ("threads", "processes", "auto", "ray")


def default_state_dir() -> Path:
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "spearpy" / "serve"


@dataclass(frozen=True)
class ServeConfig:
    modules_dir: Path | str
    state_dir: Path | str = field(default_factory=default_state_dir)
    # None = no token: only safe on loopback, which web/guard.py `check_bind` enforces.
    token: str | None = None
    max_concurrent: int = 8
    grace: float = 10.0  # seconds runs may finish in at shutdown before they are cancelled
    max_body_bytes: int = 1 << 20
    # Open connections (event streams included) before new ones are closed
    # unanswered; None = half the process's file descriptor limit. And how
    # long a request head may take to arrive (web/connections.py).
    max_connections: int | None = None
    head_timeout: float = 10.0
    # Models and backends a request may pick; empty = the operator's choice only.
    allow_models: tuple[str, ...] = ()
    allow_backends: tuple[str, ...] = ()
    # Tool arguments and results in events (redacted): the live view needs them,
    # and the caller chose the run's input anyway. Off = sizes and hashes only.
    event_content: bool = True
    # Longest content string (tool argument, tool output, transcript) kept in
    # one event; longer ones are cut with a marker, so one chatty tool cannot
    # fill the store or a subscriber's memory.
    max_event_content_bytes: int = 64 << 10
    replay_buffer: int = 2048  # events per live run kept in memory for late subscribers
    retry_after_s: int = 1
    host: HostConfig | None = None  # None = HostConfig() (flags' env and defaults)
    # Where runs execute (serve/executors.py): "threads" of this process's
    # Host, "processes" (worker processes, each with a Host), "auto" (worker
    # processes, threads for runs that need this process: serve/auto.py), or
    # "ray". Threads here, where an embedder's own Host may carry objects
    # that exist only in this process; `spearpy serve` defaults to auto.
    executor: str = "threads"
    workers: int | None = None  # worker processes / Ray actors; None = by CPUs
    ray_address: str | None = None  # with executor="ray": "auto", "local", host:port
    # Journal each run in the state directory (docs/durable.md), so that a
    # restarted service resumes the runs a crash interrupted, and a worker
    # process that dies under a run hands it to another (at most
    # `max_resumes` times). Off here, as the embedding API's runs were
    # before (a journal is charged to a run's max_host_bytes); `spearpy
    # serve` turns it on unless --no-journal.
    journal: bool = False
    max_resumes: int = 2
    # Worker processes and Ray actors that are alive but answer nothing
    # (executors/watch.py): a run still going `watch_grace` s past its
    # deadline ends `timeout`; a worker silent under runs for
    # `watch_silence` s that does not answer a ping within as long again is
    # taken for hung. Either way the worker is killed.
    watch_grace: float = GRACE_S
    watch_silence: float = SILENCE_S

    def __post_init__(self) -> None:
        if self.max_concurrent < 1:
            raise ValueError("max_concurrent must be at least 1")
        if self.grace < 0:
            raise ValueError("grace must not be negative")
        if self.max_body_bytes < 1024:
            raise ValueError("max_body_bytes must be at least 1024")
        if self.max_connections is not None and self.max_connections < 1:
            raise ValueError("max_connections must be at least 1")
        if self.head_timeout <= 0:
            raise ValueError("head_timeout must be positive")
        if self.executor not in EXECUTORS:
            raise ValueError(f"executor must be one of {', '.join(EXECUTORS)}, "
                             f"not {self.executor!r}")
        if self.executor == "ray" and not self.ray_address:
            raise ValueError("the ray executor needs a cluster address (--ray ADDRESS)")
        if self.workers is not None and self.workers < 1:
            raise ValueError("workers must be at least 1")
        if self.max_resumes < 0:
            raise ValueError("max_resumes must not be negative")
        check_bound("watch_grace", self.watch_grace)
        check_bound("watch_silence", self.watch_silence)
        check_token(self.token)

    @property
    def modules_path(self) -> Path:
        return Path(self.modules_dir)

    @property
    def state_path(self) -> Path:
        return Path(self.state_dir)
