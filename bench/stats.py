"""Timing primitives: interleaved batches, percentiles, and result rows."""

from __future__ import annotations

import gc
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass(slots=True)
class Series:
    """Per-operation times (seconds), one sample per timed batch."""

    samples: list[float] = field(default_factory=list)

    def add(self, seconds: float) -> None:
        self.samples.append(seconds)

    @property
    def p50(self) -> float:
        return percentile(self.samples, 50)

    @property
    def p95(self) -> float:
        return percentile(self.samples, 95)

    def as_dict(self, unit: float) -> dict[str, Any]:
        return {"p50": round(self.p50 / unit, 3), "p95": round(self.p95 / unit, 3),
                "n": len(self.samples)}


def percentile(values: list[float], pct: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    if len(ordered) == 1:
        return ordered[0]
    rank = (len(ordered) - 1) * pct / 100.0
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def time_batch(op: Callable[[], Any], batch: int) -> float:
    """Seconds per call of `op`, over `batch` back-to-back calls."""
    start = time.perf_counter()
    for _ in range(batch):
        op()
    return (time.perf_counter() - start) / batch


def interleaved(ops: dict[str, Callable[[], Any]], *, batch: int, repeats: int,
                warmup: int = 1, between: Callable[[], Any] | None = None) -> dict[str, Series]:
    """Time every op in turn, `repeats` rounds of `batch` calls each.

    Round-robin order means a slow spell of the machine lands on every
    subject, not on one; the collector runs between batches, not inside them.
    """
    for op in ops.values():
        for _ in range(warmup):
            if between is not None:
                between()
            time_batch(op, batch)
    series = {name: Series() for name in ops}
    enabled = gc.isenabled()
    try:
        for _ in range(repeats):
            for name, op in ops.items():
                if between is not None:
                    between()
                gc.collect()
                gc.disable()
                try:
                    series[name].add(time_batch(op, batch))
                finally:
                    if enabled:
                        gc.enable()
    finally:
        if enabled:
            gc.enable()
    return series


@dataclass(frozen=True, slots=True)
class Target:
    """A bound on the p50 ratio subject/baseline, e.g. ('<=', 0.125)."""

    op: str
    value: float
    text: str = ""

    def met(self, ratio: float) -> bool:
        return ratio <= self.value if self.op == "<=" else ratio >= self.value

    def describe(self) -> str:
        return self.text or f"{self.op} {self.value:g}"


@dataclass(slots=True)
class Row:
    """One line of the report: a subject against its baseline."""

    id: str
    scenario: str
    subject: str
    baseline: str
    unit: str  # "us", "ms" or "s"
    subject_series: Series | None = None
    baseline_series: Series | None = None
    target: Target | None = None
    note: str = ""
    extra: dict[str, Any] = field(default_factory=dict)
    peak_kb: float | None = None  # peak memory of the subject, when measured

    @property
    def scale(self) -> float:
        return {"us": 1e-6, "ms": 1e-3, "s": 1.0}[self.unit]

    def ratio(self, which: str = "p50") -> float | None:
        if self.subject_series is None or self.baseline_series is None:
            return None
        base = getattr(self.baseline_series, which)
        return getattr(self.subject_series, which) / base if base else None

    @property
    def met(self) -> bool | None:
        ratio = self.ratio()
        if self.target is None or ratio is None:
            return None
        return self.target.met(ratio)

    def as_dict(self) -> dict[str, Any]:
        def series(s: Series | None) -> dict[str, Any] | None:
            return s.as_dict(self.scale) if s is not None else None

        r50, r95 = self.ratio("p50"), self.ratio("p95")
        return {
            "id": self.id, "scenario": self.scenario, "subject": self.subject,
            "baseline": self.baseline, "unit": self.unit,
            "subject_time": series(self.subject_series),
            "baseline_time": series(self.baseline_series),
            "ratio_p50": round(r50, 4) if r50 is not None else None,
            "ratio_p95": round(r95, 4) if r95 is not None else None,
            "target": self.target.describe() if self.target else None,
            "met": self.met, "note": self.note, "extra": self.extra,
            "peak_kb": round(self.peak_kb, 1) if self.peak_kb is not None else None,
        }  # fmt: skip


def single(seconds: list[float]) -> Series:
    return Series(list(seconds))
