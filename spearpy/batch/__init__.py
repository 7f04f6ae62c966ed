"""Run one guest module over many inputs: threads, worker processes or Ray.

    from spearpy.batch import ProcessExecutor, run_batch
    summary = run_batch("agent.wasm", "inputs.jsonl", "results.jsonl",
                        ProcessExecutor(processes=4, threads=8), config=HostConfig(...))

See docs/embedding.md for the file formats.

Names are imported on first use: `spearpy run` imports none of this.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from spearpy._lazy import lazy_names

if TYPE_CHECKING:
    from spearpy.batch.dispatch import DEFAULT_MAX_ATTEMPTS
    from spearpy.batch.executors import ProcessExecutor, RayExecutor, ThreadExecutor
    from spearpy.batch.jobs import (
        WORKER_LOST,
        BatchError,
        BatchInput,
        RunSettings,
        WorkerError,
        read_inputs,
    )
    from spearpy.batch.run_journals import JournalPolicy
    from spearpy.batch.runner import BatchSummary, Executor, default_layout, run_batch
    from spearpy.batch.spec import WorkerSpec

_WHERE = {
    "DEFAULT_MAX_ATTEMPTS": "dispatch", "WORKER_LOST": "jobs", "BatchError": "jobs",
    "BatchInput": "jobs", "RunSettings": "jobs", "WorkerError": "jobs", "read_inputs": "jobs",
    "ThreadExecutor": "executors", "ProcessExecutor": "executors", "RayExecutor": "executors",
    "BatchSummary": "runner", "Executor": "runner", "default_layout": "runner",
    "run_batch": "runner", "WorkerSpec": "spec", "JournalPolicy": "run_journals",
}

__all__ = [
    "DEFAULT_MAX_ATTEMPTS",
    "WORKER_LOST",
    "BatchError",
    "BatchInput",
    "BatchSummary",
    "Executor",
    "JournalPolicy",
    "ProcessExecutor",
    "RayExecutor",
    "RunSettings",
    "ThreadExecutor",
    "WorkerError",
    "WorkerSpec",
    "default_layout",
    "read_inputs",
    "run_batch",
]


__getattr__ = lazy_names(__name__, _WHERE)
