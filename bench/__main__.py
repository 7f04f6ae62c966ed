"""`python -m bench [--quick] [--only P1,P3] [--json PATH] [--markdown] [--profile]`

Runs the scenarios, prints the table and writes the JSON document
(default bench/results/latest.json); a full run (every scenario, not
--quick, or --archive) also keeps a copy named for its time and machine,
bench/results/<UTC time>-<host>[-<scenarios>].json, the file docs/benchmarks.md
quotes.
Exit status 0 whatever the ratios: figures are reported, never asserted; 1
only when a scenario crashed.

`--profile` measures nothing: it records py-spy flame graphs (SVG) of P2 and
P5 (or the --only ones) into bench/results/, each scenario in a process of
its own run under `py-spy record`.
"""

from __future__ import annotations

import argparse
import importlib
import platform
import shutil
import subprocess
import sys
import time
import traceback
from pathlib import Path

from bench.report import (
    document,
    machine,
    machine_line,
    markdown_table,
    text_table,
    write_json,
)
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
    "D": "bench.d_durable",
    "T": "bench.t_parallel",
}
ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
PROFILED = ("P2", "P5")  # what --profile records unless --only says otherwise
PROFILE_RATE_HZ = 250


def stamp() -> str:
    """A file name for this run: UTC minute and host, e.g. 2026-11-25T0400Z-vm."""
    host = "".join(c if c.isalnum() or c in "-_" else "_" for c in platform.node()) or "host"
    return time.strftime("%Y-%m-%dT%H%MZ", time.gmtime()) + f"-{host}"


def _archive_path(suffix: str) -> Path:
    """A new file for this run: a partial run is named for its scenarios,
    and a second run within the same minute gets -2, -3 (it overwrote the
    first before)."""
    base = f"{stamp()}{suffix}"
    path, n = RESULTS / f"{base}.json", 1
    while path.exists():
        n += 1
        path = RESULTS / f"{base}-{n}.json"
    return path


def _py_spy() -> str | None:
    """py-spy beside this interpreter (bench/.venv) or on PATH."""
    local = Path(sys.executable).parent / "py-spy"
    return str(local) if local.is_file() else shutil.which("py-spy")


def profile(chosen: list[str]) -> int:
    spy = _py_spy()
    if spy is None:
        print("[bench] py-spy is not installed (tools/bench_env.sh installs it)", file=sys.stderr)
        return 1
    failed = 0
    prefix = stamp()
    for name in chosen:
        out = RESULTS / f"{prefix}-{name}.svg"
        out.parent.mkdir(parents=True, exist_ok=True)
        # Only this process is sampled, not its children (P2's model server).
        argv = [spy, "record", "--format", "flamegraph", "--rate", str(PROFILE_RATE_HZ),
                "--output", str(out), "--", sys.executable, "-m", "bench", "--profile-child",
                name]
        print(f"[bench] profiling {name} -> {out}", file=sys.stderr, flush=True)
        done = subprocess.run(argv, check=False)
        if done.returncode != 0 or not out.is_file():
            failed += 1
            print(f"[bench] py-spy failed for {name} (exit {done.returncode}); it needs "
                  "ptrace of its child (a container may need --cap-add SYS_PTRACE)",
                  file=sys.stderr)
    return 1 if failed else 0


def profile_child(name: str) -> int:
    """What --profile samples: the scenario's `profile()` (spearpy's side
    alone, repeated) when it has one, else its quick run."""
    module = importlib.import_module(SCENARIOS[name])
    target = getattr(module, "profile", None)
    if target is not None:
        target()
    else:
        module.run(True)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer repeats: a smoke run")
    parser.add_argument("--only", default="", help="comma-separated scenarios: "
                        + ",".join(SCENARIOS))
    parser.add_argument("--json", type=Path, default=RESULTS / "latest.json")
    parser.add_argument("--archive", action=argparse.BooleanOptionalAction, default=None,
                        help="also write bench/results/<UTC time>-<host>.json (default: "
                        "only for a full run)")
    parser.add_argument("--markdown", action="store_true", help="print a Markdown table too")
    parser.add_argument("--profile", action="store_true",
                        help="record py-spy flame graphs of P2 and P5 instead of measuring")
    parser.add_argument("--profile-child", choices=list(SCENARIOS), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.profile_child:
        return profile_child(args.profile_child)
    default = list(PROFILED) if args.profile else list(SCENARIOS)
    chosen = [s.strip() for s in args.only.split(",") if s.strip()] or default
    unknown = [s for s in chosen if s not in SCENARIOS]
    if unknown:
        parser.error(f"unknown scenario(s) {unknown}; known: {', '.join(SCENARIOS)}")
    if args.profile:
        return profile(chosen)
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
    doc = document(rows, quick=args.quick, elapsed_s=elapsed, meta=meta)
    write_json(doc, args.json)
    written = [args.json]
    full = not args.quick and chosen == list(SCENARIOS)
    if args.archive or (args.archive is None and full):
        archived = _archive_path("" if full else "-" + "-".join(chosen))
        write_json(doc, archived)
        written.append(archived)
    if args.markdown:
        print()
        print(machine_line(doc, str(written[-1].resolve().relative_to(ROOT))
                           if written[-1].resolve().is_relative_to(ROOT) else str(written[-1])))
        print()
        print(markdown_table(rows))
    print(f"\n[bench] {len(rows)} rows in {elapsed:.0f} s; JSON: "
          + ", ".join(map(str, written)), file=sys.stderr)
    return 1 if crashed else 0


if __name__ == "__main__":
    sys.exit(main())
