"""`python -m bench [--quick] [--only P1,P3] [--json PATH] [--markdown]`

Runs the scenarios, prints the table and writes the JSON document
(default bench/results/latest.json). Exit status 0 whatever the ratios:
figures are reported, never asserted; 1 only when a scenario crashed.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import time
import traceback
from pathlib import Path

from bench.report import document, machine, markdown_table, text_table, write_json
from bench.stats import Row

# scenario -> module; run in this order (cheap and noise-sensitive first).
SCENARIOS = {
    "P1": "bench.p1_calls",
    "P5": "bench.p5_loop",
    "P2": "bench.p2_http",
    "S": "bench.scenarios",
    "P3": "bench.p3_startup",
    "P4": "bench.p4_concurrency",
    "M": "bench.m_mcp",
    "R": "bench.r_routing",
    "U": "bench.u_streams",
    "SV": "bench.s_serve",
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer repeats: a smoke run")
    parser.add_argument("--only", default="", help="comma-separated scenarios: "
                        + ",".join(SCENARIOS))
    parser.add_argument("--json", type=Path,
                        default=Path(__file__).parent / "results" / "latest.json")
    parser.add_argument("--markdown", action="store_true", help="print a Markdown table too")
    args = parser.parse_args(argv)
    chosen = [s.strip() for s in args.only.split(",") if s.strip()] or list(SCENARIOS)
    unknown = [s for s in chosen if s not in SCENARIOS]
    if unknown:
        parser.error(f"unknown scenario(s) {unknown}; known: {', '.join(SCENARIOS)}")
    meta = machine()
    started = time.perf_counter()
    rows: list[Row] = []
    crashed = False
    for name in chosen:
        t0 = time.perf_counter()
        print(f"[bench] {name} ...", file=sys.stderr, flush=True)
        try:
            rows += importlib.import_module(SCENARIOS[name]).run(args.quick)
        except Exception:
            crashed = True
            traceback.print_exc()
            rows.append(Row(f"{name}.crashed", name, "scenario crashed", "-", "us",
                            note=traceback.format_exc(limit=1).strip().splitlines()[-1]))
        print(f"[bench] {name} done in {time.perf_counter() - t0:.1f} s", file=sys.stderr,
              flush=True)
    elapsed = time.perf_counter() - started
    print(text_table(rows))
    if args.markdown:
        print()
        print(markdown_table(rows))
    doc = document(rows, quick=args.quick, elapsed_s=elapsed, meta=meta)
    write_json(doc, args.json)
    print(f"\n[bench] {len(rows)} rows in {elapsed:.0f} s; JSON: {args.json}", file=sys.stderr)
    return 1 if crashed else 0


if __name__ == "__main__":
    sys.exit(main())
