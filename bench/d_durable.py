"""D: what durable runs cost (issue 31, docs/durable.md).

- Journaling, against the same work without a journal, interleaved: a P5
  loop iteration (in-process model + wasm `sum`, slope between K_LO and
  K_HI tool rounds) and a P2 iteration (one AUTO send of 6 completions and
  5 wasm tool calls over loopback HTTP), each with a journal in a file
  store in a tmp dir, `--journal-sync send` (an fdatasync when a send
  completes). The P5 slope leaves a send's own costs (its fdatasync among
  them) out, as it leaves the send's set-up out, so its journal is on
  tmpfs (/dev/shm); the P2 iteration is a send's time over its
  completions, its fdatasync on the disk's tmp dir included.
- A 100-send run (bench.wat_agent) against the 20 ms bench model (the
  latency server, in a process of its own that counts the requests it
  gets): the run live and journaled, the pure replay of its journal, and a
  resume of that journal with its end record cut off (a crash after the
  last send: the resume re-executes the guest from its start, answered by
  the journal, opens it for appending and ends it). The requests each
  reaches the model with are counted at the server and are part of the
  replay and resume rows' targets: the journal holds every answer, so a
  replay or resume that asks the model anything misses them. For
  information, the same run live without a journal: what journaling costs
  a run whose model is not free (mostly each send's fdatasync, waited for
  before the next send's request).
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.guests import LiveGuest
from bench.p2_http import TOOL_ITERATIONS, _Sends
from bench.p5_loop import K_HI, K_LO, SpearLoop
from bench.stats import Row, Series, Target, interleaved
from bench.upstream import ServerProcess, tool_script
from bench.wat_agent import agent_wasm
from spearpy.durable import JournalSpec, open_run_journal, run_start
from spearpy.host import Host
from spearpy.instance import GuestRun
from spearpy.journal import SyncPolicy
from spearpy.outcome import RunResult

SYNC = SyncPolicy.SEND  # the default, and what the row names
JOURNAL_TARGET = 1.05  # journaling costs at most 5 % of an iteration
SENDS = 100
MODEL_LATENCY_MS = 20
RESUME_TARGET = 2.0  # a resume at most 2x the same run's pure replay
REPLAY_TARGET = 0.1  # a replay at most 0.1x the live run
BENCH_KEY = "sk-bench-0123456789abcdefghijklmnopqrstuv"  # no model sees it


@dataclass(frozen=True, slots=True)
class _NoRequestsTarget(Target):
    """A ratio bound that also holds only when the model got no request."""

    requests: int = 0

    def met(self, ratio: float) -> bool:
        # Not super(): a slots dataclass is a new class, which its cell misses.
        return self.requests == 0 and Target.met(self, ratio)


def _journal(run: GuestRun, path: Path, secrets: list[str] | None = None,
             sync: SyncPolicy = SYNC) -> None:
    """Journal a live guest's run into `path` from here on, as Host.run
    binds a run's journal (a LiveGuest is a run that was never started);
    `secrets` as Host.run passes the values of the backends' key variables."""
    start = run_start(module_sha256=run.module.sha256, argv=[], env_names=[], stdin=b"",
                      limits={}, flags={}, secrets=secrets or [])
    run.journal = open_run_journal(JournalSpec(path, sync=sync), start, secrets or [])
    run.journal.bind(run)


def _end_journal(run: GuestRun) -> None:
    if run.journal is not None:
        run.journal.end("exited", 0)  # closes the writer (and its lock)


def _fs_type(path: Path) -> str:
    """The file system `path` is on (the longest mount point above it): an
    fdatasync costs what the file system makes it cost."""
    best, kind = "", "unknown"
    try:
        for line in Path("/proc/mounts").read_text().splitlines():
            fields = line.split()
            if len(fields) > 2 and (str(path) + "/").startswith(fields[1].rstrip("/") + "/") \
                    and len(fields[1]) >= len(best):
                best, kind = fields[1], fields[2]
    except OSError:
        pass
    return kind


def _where(directory: Path) -> str:
    return f"file store in {directory.parent} ({_fs_type(directory)}), --journal-sync {SYNC}"


def p5_iteration(directory: Path, repeats: int) -> list[Row]:
    """P5's loop iteration with a journal and without, interleaved; and
    with a journal whose run has an API key to keep out of it (a backend's
    key variable set, as in production: the scrubber then looks at what is
    journaled)."""
    loops = {"none": SpearLoop(), "journal": SpearLoop(), "journal_key": SpearLoop()}
    _journal(loops["journal"].guest.run, directory / "p5.jsonl")
    _journal(loops["journal_key"].guest.run, directory / "p5-key.jsonl", [BENCH_KEY])

    def prepare() -> None:
        for loop in loops.values():
            loop.prepare()

    try:
        prepare()
        for name, loop in loops.items():
            if '{"sum":' not in loop.run(K_LO).replace('\\"', '"'):
                raise RuntimeError(f"P5 {name}: the loop did not reach the tool")
        ops = {f"{name}@{k}": _send_of(loop, k) for name, loop in loops.items()
               for k in (K_LO, K_HI)}
        timed = interleaved(ops, batch=1, repeats=repeats, between=prepare)
        journal_bytes = (directory / "p5.jsonl").stat().st_size
    finally:
        for loop in loops.values():
            _end_journal(loop.guest.run)
            loop.close()
    per_iter = {name: Series([(hi - lo) / (K_HI - K_LO) for lo, hi in zip(
        timed[f"{name}@{K_LO}"].samples, timed[f"{name}@{K_HI}"].samples, strict=True)])
        for name in loops}
    where = _where(directory)
    return [
        Row("D.p5.iteration.journal_vs_none", "D",
            "P5 loop iteration (in-process model + wasm sum), run journaled",
            "the same loop, no journal", "us", per_iter["journal"], per_iter["none"],
            Target("<=", JOURNAL_TARGET, "<= 1.05 (journaling <= 5 %)"),
            note=f"slope between {K_LO} and {K_HI} tool rounds per send; {where}",
            extra={"journal_bytes": journal_bytes}),
        Row("D.p5.iteration.journal_key_vs_none", "D",
            "(info) P5 loop iteration, run journaled with an API key set (scrubbed from "
            "every record)", "the same loop, no journal", "us", per_iter["journal_key"],
            per_iter["none"], note=f"one key value, as Host.run passes a backend's; {where}"),
    ]


def _send_of(loop: SpearLoop, k: int) -> Callable[[], Any]:
    return lambda: loop.run(k)


def p2_iteration(directory: Path, repeats: int) -> list[Row]:
    """P2's HTTP iteration with a journal and without, interleaved: guests
    of one Host against one scripted server, one journaled as the row
    says, one journaled with no fdatasync at all (what the sync costs)."""
    with ServerProcess(tool_script(TOOL_ITERATIONS)) as server:
        host = Host(cache_dir=None, model="bench", base_url=server.base_url, max_retries=0)
        guests = {name: LiveGuest(host) for name in ("none", "journal", "journal_nosync",
                                                     "none_b2b", "journal_b2b")}
        try:
            _journal(guests["journal"].run, directory / "p2.jsonl")
            _journal(guests["journal_nosync"].run, directory / "p2-nosync.jsonl",
                     sync=SyncPolicy.NONE)
            _journal(guests["journal_b2b"].run, directory / "p2-b2b.jsonl")
            sends = {name: (_BackToBack if name.endswith("_b2b") else _Sends)(guest, 0)
                     for name, guest in guests.items()}

            def prepare() -> None:
                for s in sends.values():
                    s.prepare()

            for s in sends.values():  # one warm-up send each, untimed
                s.prepare()
                s.send()
            timed = interleaved({name: s.send for name, s in sends.items()}, batch=1,
                                repeats=repeats, between=prepare)
        finally:
            for guest in guests.values():
                _end_journal(guest.run)
                guest.close()
            host.close()
    completions = TOOL_ITERATIONS + 1
    per_iter = {k: Series([s / completions / (2 if k.endswith("_b2b") else 1)
                           for s in v.samples]) for k, v in timed.items()}
    return [
        Row("D.p2.iteration.journal_vs_none", "D",
            "P2 auto-loop iteration over loopback HTTP, run journaled",
            "the same iteration, no journal", "us", per_iter["journal"], per_iter["none"],
            Target("<=", JOURNAL_TARGET, "<= 1.05 (journaling <= 5 %)"),
            note=f"{completions} completions and {TOOL_ITERATIONS} tool calls per send, "
                 f"one fdatasync per send; scripted server in its own process; "
                 f"{_where(directory)}"),
        Row("D.p2.iteration.journal_nosync_vs_none", "D",
            "(info) the same, run journaled with --journal-sync none (no fdatasync)",
            "the same iteration, no journal", "us", per_iter["journal_nosync"],
            per_iter["none"], note="what journaling costs beside the fdatasync"),
        Row("D.p2.iteration.journal_b2b_vs_none", "D",
            "(info) the same, two sends back to back (the second waits for the first's "
            "fdatasync)", "two sends back to back, no journal", "us", per_iter["journal_b2b"],
            per_iter["none_b2b"],
            note="a send's fdatasync runs on a worker and is waited for before the next paid "
                 "call: between interleaved ops (the row above) it is done by then; here "
                 "the next send's first completion waits for what is left of it"),
    ]


class _BackToBack(_Sends):
    """Two sends of one guest, one right after the other, timed together."""

    def prepare(self) -> None:
        super().prepare()
        while len(self._ready) < 2:
            self._ready.append(self._new())

    def send(self) -> None:
        super().send()
        super().send()


class _CountingModel(ServerProcess):
    """The 20 ms bench model in its own process, keeping the number of
    requests it got in a file (written as each arrives)."""

    def __init__(self, latency_ms: int, count_file: Path) -> None:
        self._count_file = count_file
        count_file.write_text("0")
        super().__init__(None, [sys.executable, "-m", "bench.d_durable", "model",
                                str(latency_ms), str(count_file)])

    def __enter__(self) -> _CountingModel:
        return self

    def requests(self) -> int:
        return int(self._count_file.read_text().strip() or 0)


def _serve_counting_model(latency_ms: float, count_file: str) -> None:
    """bench.latency_server, every request counted: its replies come from
    `tool_reply` (with 0 tool rounds, a text answer), wrapped here."""
    import asyncio

    from bench import latency_server

    fd = os.open(count_file, os.O_WRONLY)
    count = 0
    reply = latency_server.tool_reply

    def counted(done: int, rounds: int) -> bytes:
        nonlocal count
        count += 1
        os.pwrite(fd, b"%-20d" % count, 0)
        return reply(done, rounds)

    latency_server.tool_reply = counted
    with asyncio.Runner(loop_factory=latency_server._loop) as runner:
        runner.run(latency_server.main(latency_ms, 0))


def _checked(result: RunResult, what: str) -> RunResult:
    if not result.ok:
        raise RuntimeError(f"{what}: {result.outcome} (exit {result.exit_code}): "
                           f"{result.message[:300]}")
    return result


def _answers(result: RunResult) -> list[Any]:
    """What the guest was told: the assistant messages of its transcripts."""
    return [m.get("content") for t in result.transcripts for m in t.get("messages", [])
            if m.get("role") == "assistant"]


def _cut_end(source: Path, target: Path) -> None:
    """`source` as a crash just before its run ended leaves it: no end record,
    everything before it on disk (so the resume's first fdatasync does not
    pay for writing out this copy)."""
    lines = source.read_bytes().splitlines(keepends=True)
    if b'"kind":"end"' not in lines[-1]:
        raise RuntimeError(f"{source}: the live run's journal did not end")
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, b"".join(lines[:-1]))
        os.fsync(fd)
    finally:
        os.close(fd)


def durable_runs(directory: Path, repeats: int) -> list[Row]:
    """A 100-send run live, replayed and resumed, interleaved."""
    with _CountingModel(MODEL_LATENCY_MS, directory / "requests") as model:
        host = Host(cache_dir=None, model="bench", base_url=model.base_url, max_retries=0,
                    request_timeout=60.0)
        try:
            module = host.load(agent_wasm(SENDS))
            _checked(host.run(host.load(agent_wasm(1))), "warm-up run")
            reference = directory / "reference.jsonl"
            live = _checked(host.run(module, journal=JournalSpec(reference, sync=SYNC)),
                            "the live run")
            per_live = model.requests() - 1
            if per_live != SENDS:
                raise RuntimeError(f"the live run made {per_live} requests, not {SENDS}")
            answers = _answers(live)
            if len(answers) != SENDS:
                raise RuntimeError(f"the live run's transcripts hold {len(answers)} answers")
            counter = iter(range(1 << 30))
            requests = {"live": 0, "unjournaled": 0, "replay": 0, "resume": 0,
                        "resume_nosync": 0}
            runs = dict.fromkeys(requests, 0)
            resumed = directory / "resumed.jsonl"

            def journal_for(op: str) -> JournalSpec | None:
                if op == "unjournaled":
                    return None
                if op == "live":
                    return JournalSpec(directory / f"live-{next(counter)}.jsonl", sync=SYNC)
                if op == "replay":
                    return JournalSpec(reference, mode="replay")
                return JournalSpec(resumed, sync=SyncPolicy.NONE if op == "resume_nosync"
                                   else SYNC)

            def op(name: str) -> Callable[[], None]:
                def run() -> None:
                    spec = journal_for(name)
                    before = model.requests()
                    result = _checked(host.run(module, journal=spec), name)
                    requests[name] += model.requests() - before
                    runs[name] += 1
                    if _answers(result) != answers:
                        raise RuntimeError(f"{name}: the guest was told other things than "
                                           "the live run")
                return run

            def prepare() -> None:
                _cut_end(reference, resumed)

            timed = interleaved({name: op(name) for name in requests}, batch=1,
                                repeats=repeats, between=prepare)
        finally:
            host.close()
    counted = (f"requests that reached the model (counted by the model server): live "
               f"{requests['live']} in {runs['live']} runs (unjournaled "
               f"{requests['unjournaled']} in {runs['unjournaled']}), replay "
               f"{requests['replay']} in {runs['replay']}, resume {requests['resume']} in "
               f"{runs['resume']} (and "
               f"{requests['resume_nosync']} in {runs['resume_nosync']} without fdatasync)")
    extra = {"requests": requests, "runs": runs, "sends": SENDS,
             "journal_bytes": reference.stat().st_size}
    return [
        Row("D.resume.vs_replay", "D",
            f"resume of a {SENDS}-send run (journal cut before its end record)",
            "pure replay of the same run's journal", "ms", timed["resume"], timed["replay"],
            _NoRequestsTarget("<=", RESUME_TARGET,
                              f"<= {RESUME_TARGET:g}, 0 requests to the model",
                              requests=requests["resume"]),
            note=f"{counted}; {_where(directory)}", extra=extra),
        Row("D.resume_nosync.vs_replay", "D",
            "(info) the same resume with --journal-sync none (no fdatasync)",
            "pure replay of the same run's journal", "ms", timed["resume_nosync"],
            timed["replay"], note="what resuming costs beside the fdatasyncs"),
        Row("D.replay.vs_live", "D", f"pure replay of a {SENDS}-send run's journal",
            f"the same run live and journaled, {MODEL_LATENCY_MS} ms model", "ms",
            timed["replay"], timed["live"],
            _NoRequestsTarget("<=", REPLAY_TARGET,
                              f"<= {REPLAY_TARGET:g}, 0 requests to the model",
                              requests=requests["replay"]),
            note=counted, extra=extra),
        Row("D.live.journal_vs_none", "D",
            f"(info) a {SENDS}-send run live and journaled, --journal-sync send, "
            f"{MODEL_LATENCY_MS} ms model",
            "the same run live, no journal", "ms", timed["live"], timed["unjournaled"],
            note="what journaling costs a run whose model is not free: one fdatasync per "
                 "send, waited for before the next send's request (the guest does nothing "
                 f"between sends); {_where(directory)}"),
    ]


def run(quick: bool) -> list[Row]:
    # P5's journal on tmpfs where there is one: the slope leaves a send's
    # fdatasync out by construction, and on a disk its milliseconds of jitter
    # (twice per sample) swamped the ~20 us slope (24x in one loaded run,
    # 5.4x in quieter ones; 4.9x on tmpfs). P2 and the resume pay theirs on
    # a disk.
    shm = Path("/dev/shm")
    directories = [Path(tempfile.mkdtemp(prefix="spearpy-bench-journals-",
                                         dir=shm if shm.is_dir() else None)),
                   Path(tempfile.mkdtemp(prefix="spearpy-bench-journals-"))]
    try:
        return [*p5_iteration(directories[0], 7 if quick else 25),
                *p2_iteration(directories[1], 15 if quick else 60),
                *durable_runs(directories[1], 2 if quick else 9)]
    finally:
        for directory in directories:
            shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    # `python -m bench.d_durable model LATENCY_MS COUNT_FILE`: the counting model.
    if sys.argv[1:2] != ["model"] or len(sys.argv) != 4:
        sys.exit("usage: python -m bench.d_durable model LATENCY_MS COUNT_FILE")
    _serve_counting_model(float(sys.argv[2]), sys.argv[3])
