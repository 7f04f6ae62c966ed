"""`spearpy batch` resumes a half-done input mid-run (issue 31): each input's
run is journaled, so a batch killed (SIGKILL) or stopped (SIGINT) while an
input is at its third completion goes on from there when run again; the
completions its journal holds are not asked again.

The guest is echo_agent; the scripted model makes it call its echo tool
ROUNDS - 1 times before answering, each completion slow, so a completion is
known by (the input's prompt, how many tool messages it carries). A gate
holds one chosen input's third completion at the model until the batch has
been stopped, so that input is certainly mid-run at the stop.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import signal
import subprocess
import sys
import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from spearpy import HostConfig
from spearpy.batch import (
    JournalPolicy,
    ProcessExecutor,
    RunSettings,
    ThreadExecutor,
    read_inputs,
    run_batch,
)
from spearpy.batch.dispatch import Dispatch, _journal_busy
from spearpy.batch.jobs import BatchError, BatchInput
from spearpy.batch.run_journals import RunJournals
from spearpy.journal import FileJournalStore
from tests.test_embed_support import (
    ECHO_WASM,
    Gate,
    check_results,
    make_inputs,
    prompt_of,
    read_results,
    stable,
    write_inputs,
)

COUNT = 12
ROUNDS = 4  # completions per input
DELAY_MS = 100  # each completion's: the batch is slow enough to stop mid-way
HELD = 6  # the input whose third completion the gate holds
HELD_ROUND = 2
WAIT_S = 120  # generous: a loaded CI machine, not a timing assertion


def _user(request: dict[str, Any]) -> str:
    return next((m.get("content") for m in request.get("messages", [])
                 if m.get("role") == "user"), "") or ""


def _round(request: dict[str, Any]) -> int:
    return sum(1 for m in request.get("messages", []) if m.get("role") == "tool")


class RoundGate(Gate):
    """Holds the first request of `prompt` at `round` until released."""

    def __init__(self, prompt: str, round_: int) -> None:
        super().__init__(prompt)
        self.round = round_

    def matches(self, request: dict[str, Any]) -> bool:
        return _user(request) == self.marker and _round(request) == self.round

    def answer(self, request: dict[str, Any]) -> dict[str, Any]:
        return _echo(self.round)


def _echo(round_: int) -> dict[str, Any]:
    if round_ < ROUNDS - 1:
        return {"tool_calls": [{"name": "echo", "arguments": {"text": "{{last_user}}"}}],
                "delay_ms": DELAY_MS}
    return {"content": "echo: {{last_tool}}", "delay_ms": DELAY_MS}


def _script(gate: RoundGate | None = None) -> dict[str, Any]:
    rules: list[dict[str, Any]] = [
        {"name": f"round {n}", "when": {"tool_messages": n}, "reply": _echo(n)}
        for n in range(ROUNDS)]
    if gate is not None:
        rules.insert(0, {"name": "gate", "when": gate.when, "reply": gate.reply})
    return {"rules": rules}


def _batch(server: Any, inputs: Path, out: Path, *extra: str) -> subprocess.Popen[str]:
    command = [sys.executable, "-m", "spearpy", "batch", str(ECHO_WASM), "--inputs",
               str(inputs), "--out", str(out), "--base-url", server.base_url, "--model",
               "test-model", "--max-retries", "0", "--no-cache", "--jobs", "3", *extra]
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _finish(proc: subprocess.Popen[str]) -> tuple[int, str]:
    _, err = proc.communicate(timeout=300)
    return proc.returncode, err


def _asked(server: Any) -> Counter[tuple[str, int]]:
    """How often each completion (prompt, round) reached the model."""
    return Counter((_user(r.body), _round(r.body)) for r in server.requests if r.body)


def _check_asked(asked: Counter[tuple[str, int]], items: list[dict[str, Any]]) -> None:
    """Every completion asked; at most one per input asked twice (the one in
    flight at the stop), and none of the held input's earlier rounds again."""
    for item in items:
        prompt = prompt_of(item)
        counts = [asked[(prompt, n)] for n in range(ROUNDS)]
        assert all(counts), (item["id"], counts)
        assert sum(counts) <= ROUNDS + 1, (item["id"], counts)
    held = [asked[(prompt_of(items[HELD]), n)] for n in range(ROUNDS)]
    assert held[:HELD_ROUND] == [1] * HELD_ROUND, held


def _reference(scripted: Any, inputs: Path, tmp_path: Path) -> dict[str, dict[str, Any]]:
    """The results of the same batch never stopped."""
    out = tmp_path / "reference.jsonl"
    code, err = _finish(_batch(scripted(_script()), inputs, out, "--threads"))
    assert code == 0, err
    return {k: stable(v) for k, v in read_results(out).items()}


@pytest.mark.parametrize(("signum", "layout"), [
    (signal.SIGKILL, ()),  # worker processes, orphaned: they cancel their runs
    (signal.SIGINT, ("--threads",)),
], ids=["sigkill-processes", "sigint-threads"])
def test_a_stopped_batch_resumes_inputs_mid_run(tmp_path: Path, scripted: Any, signum: int,
                                                layout: tuple[str, ...]) -> None:
    items = make_inputs(COUNT)
    inputs = write_inputs(tmp_path / "in.jsonl", items)
    reference = _reference(scripted, inputs, tmp_path)

    gate = RoundGate(prompt_of(items[HELD]), HELD_ROUND)
    server = scripted(_script(gate))
    out = tmp_path / "out.jsonl"
    proc = _batch(server, inputs, out, *layout)
    try:
        assert gate.arrived.wait(WAIT_S)  # the held input is mid-run
        proc.send_signal(signum)
        code, err = _finish(proc)
    finally:
        gate.release.set()
        if proc.poll() is None:
            proc.kill()
    assert code == (-signal.SIGKILL if signum == signal.SIGKILL else 130), err
    first = read_results(out) if out.exists() else {}
    assert json.dumps(items[HELD]["id"]) not in first

    code, err = _finish(_batch(server, inputs, out, *layout))
    assert code == 0, err
    _check_asked(_asked(server), items)
    final = {k: stable(v) for k, v in read_results(out).items()}
    assert final == reference, [v["message"] for v in final.values() if v["exit_code"]]
    assert "resumed mid-run" in err, err
    # Each finished input's journal went with its durable result line.
    assert not list((tmp_path / "out.jsonl.journals").glob("*.jsonl"))


def test_a_dead_workers_input_goes_on_from_its_journal(tmp_path: Path, scripted: Any) -> None:
    """The same hole inside one batch: an input whose worker process died
    runs again on another worker, from where its journal stops."""
    items = make_inputs(COUNT)
    inputs = write_inputs(tmp_path / "in.jsonl", items)
    reference = _reference(scripted, inputs, tmp_path)
    gate = RoundGate(prompt_of(items[HELD]), HELD_ROUND)
    server = scripted(_script(gate))
    executor = ProcessExecutor(2, 2)
    config = HostConfig(base_url=server.base_url, model="test-model", max_retries=0,
                        cache_dir=tmp_path / "cache")
    out = tmp_path / "out.jsonl"
    with ThreadPoolExecutor(1) as pool:
        batch = pool.submit(run_batch, ECHO_WASM, inputs, out, executor, config=config)
        try:
            assert gate.arrived.wait(WAIT_S)
            for pid in executor.worker_pids():
                os.kill(pid, signal.SIGKILL)
        finally:
            gate.release.set()
        assert batch.result(300).complete
    # Resumed by the executor on another worker, or retried by the batch:
    # either way from the journal.
    results = read_results(out)
    assert results[json.dumps(items[HELD]["id"])]["attempts"] in (1, 2)
    assert {k: {**stable(v), "attempts": 1} for k, v in results.items()} == reference
    _check_asked(_asked(server), items)


def _config(server: Any) -> HostConfig:
    return HostConfig(base_url=server.base_url, model="test-model", max_retries=0,
                      cache_dir=None)


def _journals_of(config: HostConfig, out: Path) -> RunJournals:
    """The journals a batch of echo_agent writing `out` keeps (for their names)."""
    return RunJournals(JournalPolicy(), out, config=config, settings=RunSettings(),
                       module_sha256=hashlib.sha256(ECHO_WASM.read_bytes()).hexdigest(),
                       before_delete=lambda: None)


def test_an_input_whose_result_line_was_lost_replays_its_ended_journal(
        tmp_path: Path, scripted: Any) -> None:
    """Killed between a run's end and its result line: the run's journal has
    ended, and the input is answered from it with nothing asked again."""
    items = make_inputs(4)
    inputs = write_inputs(tmp_path / "in.jsonl", items)
    server = scripted(_script())
    out = tmp_path / "out.jsonl"
    journals = tmp_path / "out.jsonl.journals"
    summary = run_batch(ECHO_WASM, inputs, out, ThreadExecutor(2), config=_config(server),
                        journals=JournalPolicy(keep=True))
    assert summary.complete and len(list(journals.glob("*.jsonl"))) == 4
    first = read_results(out)
    lost = {json.dumps(items[1]["id"]), json.dumps(items[2]["id"])}
    out.write_text("".join(json.dumps(v) + "\n" for k, v in first.items() if k not in lost))

    server.clear_requests()
    summary = run_batch(ECHO_WASM, inputs, out, ThreadExecutor(2), config=_config(server))
    assert (summary.complete, summary.written, summary.resumed) == (True, 2, 2)
    assert server.requests == []
    assert {k: stable(v) for k, v in read_results(out).items()} == {
        k: stable(v) for k, v in first.items()}
    assert not list(journals.glob("*.jsonl"))  # the kept ones of done inputs swept too


def test_unusable_journals_start_their_input_over(tmp_path: Path, scripted: Any) -> None:
    """An empty journal (killed before its start record), a damaged one (set
    aside for a look) and one of an input since changed: each input starts
    over instead of failing, and the stale journal is removed."""
    items = make_inputs(3)
    inputs = write_inputs(tmp_path / "in.jsonl", items)
    server = scripted(_script())
    config = _config(server)
    journals = tmp_path / "out.jsonl.journals"
    ids = _journals_of(config, tmp_path / "out.jsonl")
    jobs = read_inputs(inputs)
    journals.mkdir(mode=0o700)
    (journals / f"{ids.journal_id(jobs[0])}.jsonl").write_bytes(b"")
    damaged = journals / f"{ids.journal_id(jobs[1])}.jsonl"
    damaged.write_bytes(b'{"seq":0,"kind":"start"}\n')
    stale = journals / f"{ids.journal_id(dataclasses.replace(jobs[2], argv=('old',)))}.jsonl"
    stale.write_bytes(b"")
    summary = run_batch(ECHO_WASM, inputs, tmp_path / "out.jsonl", ThreadExecutor(2),
                        config=config)
    assert (summary.complete, summary.resumed, summary.outcomes) == (True, 0, {"exited": 3})
    check_results(read_results(tmp_path / "out.jsonl"), items)
    assert not stale.exists() and not damaged.exists()
    assert damaged.with_name(damaged.name + ".damaged").read_bytes().startswith(b'{"seq":0')
    assert sum(1 for r in server.requests if r.body) == 3 * ROUNDS


def test_batch_journal_flags(tmp_path: Path, scripted: Any) -> None:
    """--journal DIR puts them there (kept with --keep-journals); --no-journal
    writes none."""
    items = make_inputs(2)
    inputs = write_inputs(tmp_path / "in.jsonl", items)
    server = scripted(_script())
    code, err = _finish(_batch(server, inputs, tmp_path / "a.jsonl", "--journal",
                               str(tmp_path / "j"), "--keep-journals"))
    assert code == 0, err
    assert len(list((tmp_path / "j").glob("*.jsonl"))) == 2
    code, err = _finish(_batch(server, inputs, tmp_path / "b.jsonl", "--no-journal"))
    assert code == 0, err
    assert not (tmp_path / "b.jsonl.journals").exists()
    code, err = _finish(_batch(server, inputs, tmp_path / "c.jsonl", "--no-journal",
                               "--keep-journals"))
    assert code == 2 and "--no-journal excludes --keep-journals" in err


def test_a_journal_held_elsewhere_is_waited_for_then_named(tmp_path: Path, scripted: Any,
                                                         monkeypatch: Any) -> None:
    """A worker of a killed batch may still hold an input's journal: the
    input waits for it, and runs again (not as a new attempt) if its run
    found it held. Held for good (another batch on the same results), the
    batch stops with an error naming the journal, losing nothing."""
    items = make_inputs(2)
    inputs = write_inputs(tmp_path / "in.jsonl", items)
    server = scripted(_script())
    config = _config(server)
    ids = _journals_of(config, tmp_path / "out.jsonl")
    store = FileJournalStore(ids.directory)
    holder = store.open_writer(ids.journal_id(read_inputs(inputs)[1]))  # an empty journal
    threading.Timer(0.5, holder.close).start()
    summary = run_batch(ECHO_WASM, inputs, tmp_path / "out.jsonl", ThreadExecutor(2),
                        config=config)
    assert summary.complete and summary.outcomes == {"exited": 2}
    check_results(read_results(tmp_path / "out.jsonl"), items)

    monkeypatch.setattr("spearpy.batch.run_journals.BUSY_WAIT_S", 0.3)
    out = tmp_path / "again.jsonl"
    held = _journals_of(config, out)
    holder = FileJournalStore(held.directory).open_writer(held.journal_id(read_inputs(inputs)[0]))
    with holder, pytest.raises(BatchError, match=r"stayed locked .* another `spearpy batch`"):
        run_batch(ECHO_WASM, inputs, out, ThreadExecutor(1), config=config)
    assert not out.exists() or out.read_text() == ""  # nothing half-written


def test_dispatch_runs_an_input_again_when_its_journal_was_busy() -> None:
    emitted: list[dict[str, object]] = []
    job = BatchInput(index=0, line=1, id="a")
    dispatch = Dispatch([job], emitted.append)
    for _ in range(3):
        taken = dispatch.take()
        assert taken == (job, 1)  # the same attempt again
        assert _journal_busy(RuntimeError("JournalBusy: journal 'x' is open for writing"))
        assert dispatch.busy(job, 1)
    assert dispatch.take() == (job, 1)
    assert not dispatch.busy(job, 1)  # a fourth time: reported, not retried forever
    assert not _journal_busy(RuntimeError("JournalError: no"))
