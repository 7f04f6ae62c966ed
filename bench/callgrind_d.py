"""D's P5 row counted in instructions: `python -m bench.callgrind_d [--k-lo 1 --k-hi 25]`.

bench.callgrind_p5's P5 iteration (the same constant model, stopped epoch
ticker, fixed hash seed, slope between two processes), three ways: no
journal, a journal (file store on tmpfs, --journal-sync send, as D's
wall-clock row), and a journal with an API key set (the scrubber has a
secret to look for). Printed: instructions per iteration on the main thread
(the guest's path), and as a ratio to no journal. Only the main thread is
counted (callgrind dumps it alone at the marker): the journal's sync worker
runs an fdatasync per send and no Python of the iteration's.

`--inner K --mode M` is the measured process itself.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path
from typing import Any

from bench import callgrind_p5
from bench.callgrind_p5 import K_HI, K_LO, SENDS

MODES = ("none", "journal", "key")
KEY = "sk-bench-0123456789abcdefghijklmnopqrstuv"


def inner(k: int, k_max: int, mode: str, directory: str) -> None:
    from bench.d_durable import _journal

    def journaled(run: Any) -> None:
        if mode != "none":
            _journal(run, Path(directory) / "p5.jsonl", [KEY] if mode == "key" else None)

    callgrind_p5.inner(k, k_max, journaled)


def _count(args: list[str], out_dir: Path) -> int:
    """The main thread's instructions between the two markers."""
    return callgrind_p5._count(args, out_dir, "bench.callgrind_d")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--k-lo", type=int, default=K_LO)
    parser.add_argument("--k-hi", type=int, default=K_HI)
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--inner", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--k-max", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--mode", choices=MODES, help=argparse.SUPPRESS)
    parser.add_argument("--dir", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.inner is not None:
        inner(args.inner, args.k_max or args.inner, args.mode or "none", args.dir or ".")
        return
    shm = "/dev/shm" if Path("/dev/shm").is_dir() else None
    per: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="spearpy-callgrind-") as tmp, \
            tempfile.TemporaryDirectory(prefix="spearpy-callgrind-j-", dir=shm) as journals:
        k_hi = str(args.k_hi)
        for mode in args.modes.split(","):
            counts = []
            for k in (str(args.k_lo), k_hi):
                where = Path(journals) / f"{mode}-{k}"
                where.mkdir()
                counts.append(_count(["--inner", k, "--k-max", k_hi, "--mode", mode,
                                      "--dir", str(where)], Path(tmp)))
            per[mode] = (counts[1] - counts[0]) / ((args.k_hi - args.k_lo) * SENDS)
    base = per.get("none")
    for mode, count in per.items():
        ratio = f", {count / base:.3f}x none" if base else ""
        print(f"D P5 callgrind {mode:8s}: {count:,.0f} instructions per iteration "
              f"(main thread, K={args.k_lo}..{args.k_hi}){ratio}")


if __name__ == "__main__":
    main()
