"""Where a run executes, for every entry point that runs many (`spearpy
batch`, `spearpy serve`): threads of a Host in this process, worker
processes with Hosts of their own, or actors on a Ray cluster.

One interface (base.py): `submit` a RunJob with two callbacks, `on_event`
for each event as it happens and `on_end` once with the run's result;
`cancel` it; a worker that dies ends its runs as `worker_lost`; `close`.
What the caller does with the results (batch: its results file and
retries; serve: its store and event streams) stays with the caller.

Names are imported on first use: a worker process needs only base, hosts
and worker, and `spearpy run` none of this.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from spearpy._lazy import lazy_names

if TYPE_CHECKING:
    from spearpy.executors.base import Executor, ExecutorError, OnEnd, RunJob, worker_lost
    from spearpy.executors.hosts import HostPool
    from spearpy.executors.procs import ProcessRuns
    from spearpy.executors.ray_runs import RayRuns
    from spearpy.executors.threads import ThreadRuns

_WHERE = {
    "Executor": "base", "ExecutorError": "base", "OnEnd": "base", "RunJob": "base",
    "worker_lost": "base", "HostPool": "hosts", "ProcessRuns": "procs", "RayRuns": "ray_runs",
    "ThreadRuns": "threads",
}

__all__ = ["Executor", "ExecutorError", "HostPool", "OnEnd", "ProcessRuns", "RayRuns", "RunJob",
           "ThreadRuns", "worker_lost"]

__getattr__ = lazy_names(__name__, _WHERE)
