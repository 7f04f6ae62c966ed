"""P5 counted in instructions: `python -m bench.callgrind_p5 [--k-lo 1 --k-hi 25]`.

Wall-clock P5 on a shared, loaded machine moves by more than the changes it
is asked to judge; instruction counts do not. This runs one send of K_LO tool
rounds and one of K_HI, each in its own process under `valgrind
--tool=callgrind`, and prints the main thread's instructions per iteration:
(Ir(K_HI) - Ir(K_LO)) / (K_HI - K_LO). Start-up, warm-up and the send's fixed
cost are the same in both processes and cancel.

What differs from `python -m bench --only P5` (docs/benchmarks.md, "Tricks
kept and removed"): the model costs the same on every iteration (its bodies
are built before the warm-up, for K_HI rounds in both processes), the epoch
ticker is stopped (under valgrind it would tick into the count), and only
the main thread is counted. PYTHONHASHSEED is fixed so that two runs of the
same tree count the same.

`--inner K` is the measured process itself; run it plainly to see it work.
"""

from __future__ import annotations

import argparse
import gc
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

K_LO, K_HI = 1, 25
SENDS = 2  # measured sends per process, after one to warm up
P1_LO, P1_HI = 100, 1100  # tool calls per process, for --p1


def _bodies(rounds: int) -> list[dict[str, Any]]:
    """The model's answers, built once: `rounds` calls of sum, then text."""
    usage = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
    bodies = []
    for i in range(rounds):
        message = {"role": "assistant", "content": None, "tool_calls": [
            {"id": f"call_{i}", "type": "function",
             "function": {"name": "sum", "arguments": f'{{"a": {i}, "b": 35}}'}}]}
        bodies.append({"id": "chatcmpl-bench", "object": "chat.completion",
                       "created": 1700000000, "model": "bench",
                       "choices": [{"index": 0, "message": message,
                                    "finish_reason": "tool_calls"}],
                       "usage": usage})
    bodies.append({"id": "chatcmpl-bench", "object": "chat.completion",
                   "created": 1700000000, "model": "bench",
                   "choices": [{"index": 0, "message": {"role": "assistant",
                                                        "content": "done"},
                                "finish_reason": "stop"}],
                   "usage": usage})
    return bodies


class _ConstantModel:
    """A Backend whose every answer costs one list index: what P5 counts is
    spearpy's loop, not a model whose cost grows with the conversation."""

    name = "inprocess"
    default_model = "bench"

    def __init__(self, rounds: int) -> None:
        self._bodies = _bodies(rounds)
        self.rounds = rounds
        self._next = 0

    def reset(self, rounds: int) -> None:
        self.rounds, self._next = rounds, 0

    def complete(self, request: Any) -> Any:
        from spearpy.chat.protocol import CompletionResult

        i, self._next = self._next, self._next + 1
        body = self._bodies[i] if i < self.rounds else self._bodies[-1]
        return CompletionResult(self.name, request.model, body=body)

    def close(self) -> None:
        pass


def inner(k: int, k_max: int, prepare: Callable[[Any], None] | None = None) -> None:
    """One process of the measurement: a warm-up send, then SENDS of k rounds.
    `prepare(run)` sets the run up before its first send (bench.callgrind_d
    gives it a journal)."""
    from bench.guests import LiveGuest
    from bench.peers import PROMPT
    from bench.upstream import install_backend
    from spearpy import _native
    from spearpy.host import Host

    host = Host(cache_dir=None, model="bench", base_url="http://127.0.0.1:9/v1")
    model = _ConstantModel(k_max)
    install_backend(host, model)
    guest = LiveGuest(host)
    host._ticker.stop()  # no epoch ticks: they would land in the count
    if prepare is not None:
        prepare(guest.run)
    fds = []
    for _ in range(SENDS + 1):
        fd = guest.session()
        guest.write_msg(fd, "user", PROMPT)
        fds.append(fd)
    previous = _native.enter_run(guest.run)
    try:
        for n, fd in enumerate(fds):
            model.reset(k if n else 2)
            if n == 1:
                gc.collect()
                gc.freeze()  # what start-up left is not walked by the sends' collections
                os.getppid()  # --zero-before=os_getppid: the count starts here
            reply = guest.recv(guest.send(fd)).decode()
            if '"done"' not in reply.replace('\\"', '"'):
                raise RuntimeError(f"the send did not finish: {reply[:300]}")
        os.getpgrp()  # --dump-before=os_getpgrp: the count ends here
    finally:
        _native.enter_run(previous)
    os._exit(0)


def inner_p1(calls: int) -> None:
    """P1's tool-call row counted: `calls` GuestTools.call of the echo tool
    with P1's 200-byte arguments, one source and one budget, as a send makes them."""
    from bench.guests import ARENA_LEN, ARENA_PTR, ECHO, LiveGuest
    from bench.p1_calls import PAYLOAD
    from spearpy import _native
    from spearpy.chat.protocol import CallBudget
    from spearpy.guestcall import GuestTools
    from spearpy.host import Host

    host = Host(cache_dir=None, model="bench", base_url="http://127.0.0.1:9/v1")
    guest = LiveGuest(host)
    host._ticker.stop()
    source = GuestTools(guest.run)
    budget = CallBudget(65536, params={"tool_arena_ptr": ARENA_PTR,
                                       "tool_arena_len": ARENA_LEN})
    _native.enter_run(guest.run)
    for _ in range(10):
        source.call(ECHO, PAYLOAD, budget)
    gc.collect()
    gc.freeze()
    os.getppid()
    for _ in range(calls):
        outcome = source.call(ECHO, PAYLOAD, budget)
    os.getpgrp()
    if not outcome.ok or outcome.output != PAYLOAD:
        raise RuntimeError(f"the tool call failed: {outcome}")
    os._exit(0)


def _count(args: list[str], out_dir: Path, module: str = "bench.callgrind_p5") -> int:
    """The main thread's instructions between os.getppid() and os.getpgrp()
    in a process running `python -m MODULE ARGS`."""
    out = out_dir / ("cg." + "_".join(args).replace("-", "").replace("/", ""))
    env = dict(os.environ, PYTHONHASHSEED="0")
    subprocess.run(
        ["valgrind", "--tool=callgrind", "--separate-threads=yes", "--zero-before=os_getppid",
         "--dump-before=os_getpgrp", f"--callgrind-out-file={out}", sys.executable,
         "-m", module, *args],
        check=True, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    main = Path(f"{out}.1-01")  # the first dump (at os.getpgrp), thread 1: the main thread
    for line in main.read_text().splitlines():
        if line.startswith(("totals:", "summary:")):
            return int(line.split()[1])
    raise RuntimeError(f"no totals in {main}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--k-lo", type=int, default=K_LO)
    parser.add_argument("--k-hi", type=int, default=K_HI)
    parser.add_argument("--p1", action="store_true",
                        help="count P1's tool call instead (GuestTools.call, 200 B)")
    parser.add_argument("--inner", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--inner-p1", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--k-max", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.inner is not None:
        inner(args.inner, args.k_max or args.inner)
        return
    if args.inner_p1 is not None:
        inner_p1(args.inner_p1)
        return
    with tempfile.TemporaryDirectory(prefix="spearpy-callgrind-") as tmp:
        if args.p1:
            lo = _count(["--inner-p1", str(P1_LO)], Path(tmp))
            hi = _count(["--inner-p1", str(P1_HI)], Path(tmp))
            print(f"P1 callgrind: {(hi - lo) / (P1_HI - P1_LO):,.0f} instructions per tool "
                  f"call (main thread, {P1_LO}..{P1_HI} calls; Ir {lo:,} / {hi:,})")
            return
        k_hi = str(args.k_hi)
        lo = _count(["--inner", str(args.k_lo), "--k-max", k_hi], Path(tmp))
        hi = _count(["--inner", k_hi, "--k-max", k_hi], Path(tmp))
    per = (hi - lo) / ((args.k_hi - args.k_lo) * SENDS)
    print(f"P5 callgrind: {per:,.0f} instructions per iteration "
          f"(main thread, K={args.k_lo}..{args.k_hi}, {SENDS} sends each; "
          f"Ir {lo:,} / {hi:,})")


if __name__ == "__main__":
    main()
