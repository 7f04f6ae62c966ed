"""The report: a plain-text (or Markdown) table and the JSON document."""

from __future__ import annotations

import json
import os
import platform
import time
from importlib import metadata
from pathlib import Path
from typing import Any

from bench.stats import Row

PEER_PACKAGES = ("wasmtime", "httpx", "extism", "langgraph", "langchain", "openai-agents")


def _fmt(value: float | None, digits: int = 3) -> str:
    if value is None:
        return "-"
    if value >= 100:
        return f"{value:.0f}"
    if value >= 10:
        return f"{value:.1f}"
    return f"{value:.{digits}g}"


def _cells(row: Row) -> list[str]:
    data = row.as_dict()
    subject, baseline = data["subject_time"], data["baseline_time"]
    met = {True: "yes", False: "NO", None: "-"}[data["met"]]
    if subject is None or baseline is None:
        met = "unavailable" if row.target else "-"
    return [
        row.id, row.subject, row.baseline,
        f"{_fmt(subject['p50'])} / {_fmt(subject['p95'])}" if subject else "-",
        f"{_fmt(baseline['p50'])} / {_fmt(baseline['p95'])}" if baseline else "-",
        row.unit, _fmt(data["ratio_p50"]), data["target"] or "-", met,
    ]


HEADER = ["id", "subject", "baseline", "subject p50/p95", "baseline p50/p95", "unit",
          "ratio p50", "target", "met"]


def text_table(rows: list[Row]) -> str:
    table = [HEADER] + [_cells(r) for r in rows]
    # The long description columns are shown below the table, not in it.
    narrow = [[c for i, c in enumerate(line) if i not in (1, 2)] for line in table]
    widths = [max(len(line[i]) for line in narrow) for i in range(len(narrow[0]))]
    out = ["  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip()
           for line in narrow]
    out.insert(1, "  ".join("-" * w for w in widths))
    out.append("")
    for r in rows:
        note = f" [{r.note}]" if r.note else ""
        out.append(f"{r.id}: {r.subject} vs {r.baseline}{note}")
    return "\n".join(out)


def markdown_table(rows: list[Row]) -> str:
    lines = ["| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
    for r in rows:
        cells = [c.replace("|", "\\|") for c in _cells(r)]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def machine() -> dict[str, Any]:
    versions = {}
    for name in PEER_PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    try:
        load = os.getloadavg()[0]
    except OSError:
        load = None
    return {"python": platform.python_version(), "platform": platform.platform(),
            "cpus": os.cpu_count(), "load_1min_at_start": load, "packages": versions}


def document(rows: list[Row], *, quick: bool, elapsed_s: float,
             meta: dict[str, Any]) -> dict[str, Any]:
    return {"format": "spearpy-bench/1", "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "quick": quick, "elapsed_s": round(elapsed_s, 1), "machine": meta,
            "rows": [r.as_dict() for r in rows]}


def write_json(doc: dict[str, Any], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=1) + "\n")
