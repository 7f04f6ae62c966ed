"""run_batch: inputs file + module + executor -> results file, resumable."""

from __future__ import annotations

import dataclasses
import hashlib
import os
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from spearpy.batch.jobs import (
    EVENTS_KEY,
    BatchError,
    BatchInput,
    RunSettings,
    id_key,
    read_inputs,
)
from spearpy.batch.journal import open_results
from spearpy.batch.run_journals import JournalPolicy, RunJournals
from spearpy.batch.spec import WorkerSpec
from spearpy.config import HostConfig

if TYPE_CHECKING:
    from spearpy.observe.events import EventSink


class Executor(Protocol):
    # True if runs happen in this process: the module is then loaded here
    # anyway, and loading it ahead of the executor would only add a compile.
    in_process: bool

    def describe(self) -> str: ...

    def run(self, spec: WorkerSpec, jobs: Sequence[BatchInput],
            emit: Callable[[dict[str, Any]], None], stop: threading.Event) -> None: ...


@dataclass(slots=True)
class BatchSummary:
    total: int  # inputs in the file
    skipped: int  # already in the results file when the batch started
    written: int = 0  # result lines written by this run
    resumed: int = 0  # inputs that went on from where an earlier batch stopped them
    outcomes: dict[str, int] = field(default_factory=dict)
    interrupted: bool = False
    elapsed_s: float = 0.0

    @property
    def complete(self) -> bool:
        return not self.interrupted and self.skipped + self.written == self.total


def default_layout(jobs: int, cpus: int | None = None) -> tuple[int, int]:
    """(processes, threads per process) for `jobs` concurrent runs: one warm
    worker process per core, the rest of the concurrency as threads inside them
    (guests waiting on the model need no core of their own)."""
    cpus = cpus or os.cpu_count() or 1
    processes = max(1, min(jobs, cpus))
    return processes, -(-jobs // processes)


def _precompile(spec: WorkerSpec) -> None:
    """Load the module once here before any worker starts: a broken module
    fails the batch with ModuleLoadError at once, and the disk cache is warm
    when N workers load it at the same moment (else each compiles it)."""
    host, _module = spec.warm_host()
    host.close()


def run_batch(
    module: str | os.PathLike[str] | bytes,
    inputs: str | os.PathLike[str] | Sequence[BatchInput],
    out: str | os.PathLike[str],
    executor: Executor,
    *,
    config: HostConfig | None = None,
    transcripts: bool = False,
    on_start: Callable[[int, int], None] | None = None,
    on_result: Callable[[dict[str, Any]], None] | None = None,
    stop: threading.Event | None = None,
    name: str | None = None,
    settings: RunSettings | None = None,
    on_event: EventSink | None = None,
    journals: JournalPolicy | None = JournalPolicy(),  # noqa: B008 - frozen
) -> BatchSummary:
    """Run `module` once per input not yet in `out`, appending a result line
    per input. Ctrl-C (KeyboardInterrupt) or setting `stop` ends it early:
    runs in flight are cancelled and not written, so the next call redoes
    exactly them. `on_start(total, todo)` and `on_result(record)` feed a
    progress display; on_result runs on executor threads.

    `settings` gives every run the same env (under each input's own),
    preopened dirs and entry point. `on_event` receives every event of every
    run, in this process whatever the executor (each run's events arrive
    together when it ends, before its result line is written), so one events
    file, transcript directory or metrics registry covers the whole batch.

    `journals`: how each input's run is journaled (None: it is not), so a
    batch stopped mid-input resumes that input from its last journaled
    step; an input's journal is deleted once its result line is durable,
    unless the policy keeps it."""
    started = time.monotonic()
    if isinstance(module, bytes):
        wasm, label = module, name or "module.wasm"
    else:
        try:
            wasm = Path(module).read_bytes()
        except OSError as exc:
            raise BatchError(f"cannot read {module}: {exc.strerror or exc}") from exc
        label = name or Path(module).name
    jobs = list(inputs) if not isinstance(inputs, str | os.PathLike) else read_inputs(inputs)
    settings = settings or RunSettings()
    if on_event is not None and not settings.events:
        settings = dataclasses.replace(settings, events=True)
    config = config or HostConfig()
    stop = stop if stop is not None else threading.Event()
    lock = threading.Lock()
    closed = threading.Event()  # set once the summary is final: late records are dropped
    with open_results(out) as results:
        todo = [job for job in jobs if job.key not in results.done]
        by_key = {job.key: job for job in todo}
        store = None if journals is None else RunJournals(
            journals, out, module_sha256=hashlib.sha256(wasm).hexdigest(), config=config,
            settings=settings, before_delete=results.sync)
        if store is not None:
            store.sweep(todo)
        spec = WorkerSpec.build(config, wasm, label, transcripts=transcripts,
                                settings=settings, journals=store)
        summary = BatchSummary(total=len(jobs), skipped=len(jobs) - len(todo))
        if todo and not executor.in_process:
            _precompile(spec)
        counts: Counter[str] = Counter()
        if on_start is not None:
            on_start(len(jobs), len(todo))

        def emit(record: dict[str, Any]) -> None:
            events = record.pop(EVENTS_KEY, None) or []
            with lock:
                if stop.is_set() or closed.is_set():
                    return  # cancelled by the stop, or racing it: redone next time
                if on_event is not None:
                    # Under the lock: sinks see one run's events at a time.
                    for event in events:
                        on_event(event)
                results.write(record)
                if store is not None:
                    store.finished(by_key[id_key(record["id"])])
                summary.written += 1
                counts[str(record.get("outcome"))] += 1
            if on_result is not None:
                on_result(record)

        try:
            executor.run(spec, todo, emit, stop)
        except KeyboardInterrupt:
            stop.set()
        with lock:
            summary.interrupted = stop.is_set() and summary.skipped + summary.written < len(jobs)
            summary.outcomes = dict(counts)
            closed.set()
        if store is not None:
            store.flush()
            summary.resumed = store.resumed
    summary.elapsed_s = time.monotonic() - started
    return summary

