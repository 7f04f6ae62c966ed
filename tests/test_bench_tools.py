"""bench/'s bookkeeping (no timing here): the regression check on two JSON
documents written to real files, and the names a full run archives under."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from bench.__main__ import stamp
from bench.report import document, machine, machine_line
from bench.stats import Row, Series, Target

ROOT = Path(__file__).resolve().parents[1]


def _doc(subject_us: float, baseline_us: float) -> dict[str, Any]:
    row = Row("P9.example", "P9", "subject", "baseline", "us",
              Series([subject_us * 1e-6] * 5), Series([baseline_us * 1e-6] * 5),
              Target("<=", 0.5, "<= 0.5"))
    return document([row], quick=True, elapsed_s=1.0, meta=machine())


def _compare(tmp_path: Path, old: dict[str, Any], new: dict[str, Any],
             *flags: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "old.json").write_text(json.dumps(old))
    (tmp_path / "new.json").write_text(json.dumps(new))
    return subprocess.run([sys.executable, "-m", "bench.compare", str(tmp_path / "old.json"),
                           str(tmp_path / "new.json"), *flags], cwd=ROOT, capture_output=True,
                          text=True, timeout=60, check=False)


def test_compare_flags_a_grown_ratio_and_passes_a_steady_one(tmp_path: Path) -> None:
    steady = _compare(tmp_path, _doc(10, 100), _doc(20, 200), "--all")  # ratio 0.1 both
    assert steady.returncode == 0, steady.stdout
    assert "P9.example: 0.1 -> 0.1" in steady.stdout
    grown = _compare(tmp_path, _doc(10, 100), _doc(12, 100))  # 0.1 -> 0.12
    assert grown.returncode == 1
    assert "REGRESSION P9.example: p50 0.1 -> 0.12" in grown.stdout
    absolute = _compare(tmp_path, _doc(10, 100), _doc(10, 50), "--absolute")
    assert absolute.returncode == 0, absolute.stdout  # the subject's own time held


def test_documents_say_where_they_come_from() -> None:
    doc = _doc(10, 100)
    meta = doc["machine"]
    assert meta["host"] and meta["python"] and meta["cpus"]
    assert re.fullmatch(r"[0-9a-f]{40}(\+dirty)?", meta["commit"] or ""), meta["commit"]
    line = machine_line(doc, "bench/results/x.json")
    assert meta["host"] in line and "bench/results/x.json" in line
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d{4}Z-[\w-]+", stamp())
