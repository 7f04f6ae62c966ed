"""The Ray executor of the service (`spearpy serve --ray ADDRESS`):
spearpy/executors/ray_runs.py, whose runs get no user streams."""

from __future__ import annotations

from spearpy.executors import ray_runs
from spearpy.serve.executors import PlacedHere


class RayRuns(PlacedHere, ray_runs.RayRuns):
    streams = False  # a user stream's hub would live on the cluster
