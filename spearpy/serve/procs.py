"""The process executor of the service (`--executor processes`, and auto's
workers): spearpy/executors/procs.py, whose runs get no user streams."""

from __future__ import annotations

from spearpy.executors import procs
from spearpy.serve.executors import PlacedHere


class ProcessRuns(PlacedHere, procs.ProcessRuns):
    streams = False  # a user stream's hub would live in the worker, out of the routes' reach
