"""Compare two bench JSON documents and flag regressions.

`python -m bench.compare OLD.json NEW.json [--absolute]`

Flags a row whose p50 grew more than 7 %, whose p95 grew more than 10 %, or
whose peak memory grew more than 5 %. By default the p50/p95 compared are the
ratios to the row's baseline measured in the same run, which cancels most of
the difference between two machines or two moments of a noisy one;
`--absolute` compares the subject's own times instead. Exit 1 when anything
regressed, 0 otherwise. Run on demand: never as a timed test.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

P50_LIMIT, P95_LIMIT, PEAK_LIMIT = 0.07, 0.10, 0.05


def _values(row: dict[str, Any], absolute: bool) -> tuple[float | None, float | None]:
    """A row without a ratio (its baseline unavailable) has nothing to compare
    in ratio mode: its raw time against another run's would be noise."""
    if absolute:
        subject = row.get("subject_time") or {}
        return subject.get("p50"), subject.get("p95")
    return row.get("ratio_p50"), row.get("ratio_p95")


def _grew(old: float | None, new: float | None, limit: float) -> float | None:
    if old is None or new is None or old <= 0:
        return None
    change = new / old - 1.0
    return change if change > limit else None


def compare(old: dict[str, Any], new: dict[str, Any], absolute: bool = False) -> list[str]:
    """One line per regression (empty when none)."""
    before = {r["id"]: r for r in old.get("rows", [])}
    problems = []
    for row in new.get("rows", []):
        prior = before.get(row["id"])
        if prior is None:
            continue
        o50, o95 = _values(prior, absolute)
        n50, n95 = _values(row, absolute)
        for label, o, n, limit in (("p50", o50, n50, P50_LIMIT), ("p95", o95, n95, P95_LIMIT),
                                   ("peak memory", prior.get("peak_kb"), row.get("peak_kb"),
                                    PEAK_LIMIT)):
            change = _grew(o, n, limit)
            if change is not None:
                problems.append(f"{row['id']}: {label} {o:g} -> {n:g} (+{change:.1%}, "
                                f"limit {limit:.0%})")
    return problems


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.3g}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.compare",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("old", type=Path)
    parser.add_argument("new", type=Path)
    parser.add_argument("--absolute", action="store_true",
                        help="compare the subjects' own times, not ratios to their baselines")
    parser.add_argument("--all", action="store_true",
                        help="print every common row's p50, old -> new, not only regressions")
    args = parser.parse_args(argv)
    old, new = json.loads(args.old.read_text()), json.loads(args.new.read_text())
    for doc, path in ((old, args.old), (new, args.new)):
        m = doc.get("machine", {})
        print(f"{path}: {doc.get('created')} on {m.get('host')}, commit {m.get('commit')}"
              f"{' (quick)' if doc.get('quick') else ''}")
    if args.all:
        before = {r["id"]: r for r in old.get("rows", [])}
        for row in new.get("rows", []):
            if row["id"] in before:
                o50, n50 = _values(before[row["id"]], args.absolute)[0], \
                    _values(row, args.absolute)[0]
                print(f"  {row['id']}: {_fmt(o50)} -> {_fmt(n50)}")
    problems = compare(old, new, args.absolute)
    for line in problems:
        print("REGRESSION " + line)
    compared = len({r["id"] for r in old.get("rows", [])} & {r["id"] for r in new.get("rows", [])})
    print(f"{compared} rows compared, {len(problems)} regression(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
