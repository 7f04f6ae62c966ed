"""Run one guest module over many inputs: threads, worker processes or Ray.

    from spearpy.batch import ProcessExecutor, run_batch
    summary = run_batch("agent.wasm", "inputs.jsonl", "results.jsonl",
                        ProcessExecutor(processes=4, threads=8), config=HostConfig(...))

See docs/embedding.md for the file formats.
"""

from spearpy.batch.dispatch import DEFAULT_MAX_ATTEMPTS
from spearpy.batch.jobs import WORKER_LOST, BatchError, BatchInput, WorkerError, read_inputs
from spearpy.batch.local import ThreadExecutor
from spearpy.batch.procs import ProcessExecutor
from spearpy.batch.ray_exec import RayExecutor
from spearpy.batch.runner import BatchSummary, Executor, default_layout, run_batch
from spearpy.batch.spec import WorkerSpec

__all__ = [
    "DEFAULT_MAX_ATTEMPTS",
    "WORKER_LOST",
    "BatchError",
    "BatchInput",
    "BatchSummary",
    "Executor",
    "ProcessExecutor",
    "RayExecutor",
    "ThreadExecutor",
    "WorkerError",
    "WorkerSpec",
    "default_layout",
    "read_inputs",
    "run_batch",
]
