"""The executor interface every entry point uses, and the run it carries."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from spearpy.errors import SpearpyError
from spearpy.outcome import RunResult

if TYPE_CHECKING:
    from spearpy.durable import JournalSpec
    from spearpy.host import Host, LoadedModule
    from spearpy.observe.events import EventSink

# Called once per run: its result, or (result None) the error that stopped
# it before the guest started.
OnEnd = Callable[[RunResult | None, BaseException | None], None]
WORKER_LOST = "worker_lost"
# The event an executor sends a run's `on_event` when the run's worker died
# and the run resumes from its journal on another (a RunJob with a journal):
# the events after it are the resumed run's, whose seqs start at 0 again.
RUN_RESUMED = "run_resumed"


class ExecutorError(SpearpyError, RuntimeError):
    """The executor cannot run anything: its workers do not start, or its
    cluster cannot be reached or lost them for good."""


@dataclass(frozen=True, slots=True)
class RunJob:
    """One run as it travels to a worker: picklable, no Host objects."""

    key: str  # the caller's name for the run: what cancel() and the worker's messages use
    module: str
    sha256: str
    args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    stdin: bytes | str | None = None
    limits: dict[str, Any] = field(default_factory=dict)
    model: str | None = None  # a Host of this model/backend instead of the configured one
    backend: str | None = None
    dirs: tuple[tuple[str, str], ...] = ()
    invoke: str | None = None
    collect_events: bool = False  # the result carries the run's events (RunResult.events)
    # Journal the run there, or resume it from there (docs/durable.md).
    journal: JournalSpec | None = None


class Executor(Protocol):
    name: str  # "threads", "processes", "ray"

    @property
    def workers_lost(self) -> int:
        """Workers (processes, actors) that died so far."""

    @property
    def failure(self) -> ExecutorError | None:
        """Set once the executor cannot run anything any more; runs submitted
        after that end as worker_lost at once."""

    def start(self) -> None:
        """Start the workers; raises ExecutorError if they cannot start."""

    def submit(self, job: RunJob, wasm: bytes, host: Host | None, module: LoadedModule | None,
               cancel: threading.Event, on_event: EventSink | None, on_end: OnEnd) -> None:
        """Run `job` (its module's bytes `wasm`; in this process, `module` as
        loaded by `host`). `on_event` gets its events as they happen (None:
        they are not sent), `on_end` its end, once, from any thread."""

    def cancel(self, key: str) -> None:
        """Cancel a run elsewhere; in this process its `cancel` event does it."""

    def close(self) -> None:
        """Stop the workers; a run still going ends (as cancelled or lost)."""


def worker_lost(message: str) -> RunResult:
    """The end of a run whose worker died under it."""
    return RunResult.ended_as(WORKER_LOST, message)


def run_on(host: Host, module: LoadedModule, job: RunJob, cancel: threading.Event,
           on_event: EventSink | None) -> RunResult:
    """`job` on `host`, wherever that Host lives. Raises only before the guest starts."""
    return host.run(module, job.args, env=job.env or None, stdin=job.stdin,
                    dirs=list(job.dirs) or None, invoke=job.invoke, limits=job.limits or None,
                    capture_output=True, cancel=cancel, on_event=on_event,
                    collect_events=job.collect_events, journal=job.journal)
