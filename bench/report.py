"""The report: a plain-text (or Markdown) table and the JSON document."""

from __future__ import annotations

import json
import os
import platform
import subprocess
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
    return {"host": platform.node(), "python": platform.python_version(),
            "platform": platform.platform(), "cpu_model": _cpu_model(), "cpus": os.cpu_count(),
            "load_1min_at_start": load, "packages": versions, "commit": _commit()}


def _cpu_model() -> str | None:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def _commit() -> str | None:
    """The checkout measured: HEAD, with "+dirty" when spearpy/ or bench/
    differ from it (the numbers then belong to uncommitted code)."""
    root = Path(__file__).resolve().parent.parent
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True,
                              text=True, check=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "spearpy", "bench"],
                               cwd=root, capture_output=True, text=True, check=True,
                               timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return head + ("+dirty" if dirty else "")


def document(rows: list[Row], *, quick: bool, elapsed_s: float,
             meta: dict[str, Any]) -> dict[str, Any]:
    return {"format": "spearpy-bench/1", "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "quick": quick, "elapsed_s": round(elapsed_s, 1), "machine": meta,
            "rows": [r.as_dict() for r in rows]}


def write_json(doc: dict[str, Any], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=1) + "\n")


def machine_line(doc: dict[str, Any], source: str) -> str:
    """One sentence naming where a table's numbers come from (for the docs)."""
    m = doc.get("machine", {})
    packages = m.get("packages") or {}
    return (f"Measured {doc.get('created')} on {m.get('host')} ({m.get('cpus')} CPUs, "
            f"{m.get('cpu_model')}; Python {m.get('python')}, wasmtime-py "
            f"{packages.get('wasmtime')}; 1-minute load at start {_load(m)}"
            f"), commit {m.get('commit')}, {'quick' if doc.get('quick') else 'full'} run of "
            f"{doc.get('elapsed_s')} s; every number below is in `{source}`.")


def _load(meta: dict[str, Any]) -> str:
    load = meta.get("load_1min_at_start")
    return f"{load:.2f}" if isinstance(load, int | float) else "unknown"
