"""`spearpy batch` end to end: threads vs processes, resume after an
interrupt, and worker processes dying mid-batch."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from spearpy import HostConfig
from spearpy.batch import ProcessExecutor, ThreadExecutor, run_batch
from tests.test_embed_support import (
    ECHO_WASM,
    Gate,
    check_results,
    echo_script,
    make_inputs,
    prompt_of,
    read_results,
    stable,
    write_inputs,
)

COUNT = 200
# argv past the guest's 64 KiB buffer: it exits 4, a deterministic failure.
TOO_BIG = {"id": "too-big", "argv": ["y" * 70000]}


def _batch(server: Any, inputs: Path, out: Path, *extra: str,
           **popen: Any) -> subprocess.Popen[str]:
    command = [sys.executable, "-m", "spearpy", "batch", str(ECHO_WASM), "--inputs", str(inputs),
               "--out", str(out), "--base-url", server.base_url, "--model", "test-model",
               "--max-retries", "0", "--no-cache", *extra]
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            **popen)


def _finish(proc: subprocess.Popen[str]) -> tuple[int, str]:
    _, err = proc.communicate(timeout=300)
    return proc.returncode, err


def test_threads_and_processes_give_identical_results(tmp_path: Path, scripted: Any) -> None:
    server = scripted(echo_script())
    items = make_inputs(COUNT)
    inputs = write_inputs(tmp_path / "in.jsonl", [*items, TOO_BIG])
    outputs = {}
    for mode in (("--threads", "--progress"), ("--processes",), ()):
        name = mode[0].strip("-") if mode else "default"
        out = tmp_path / f"{name}.jsonl"
        code, err = _finish(_batch(server, inputs, out, "--jobs", "4", *mode))
        assert code == 0, err
        assert f"{COUNT + 1} inputs, 0 already done, {COUNT + 1} run" in err
        if "--progress" in mode:  # the bar's last state: all done, one guest failed
            assert f"{COUNT + 1}/{COUNT + 1} 1 not ok" in err
        outputs[name] = read_results(out)
    threads = outputs["threads"]
    check_results({k: v for k, v in threads.items() if k != '"too-big"'}, items)
    big = threads['"too-big"']
    assert (big["outcome"], big["exit_code"], big["stdout"]) == ("exited", 4, "")
    for name in ("processes", "default"):
        assert {k: stable(v) for k, v in outputs[name].items()} == {
            k: stable(v) for k, v in threads.items()}, name


def test_interrupted_batch_resumes_without_redoing_work(tmp_path: Path, scripted: Any) -> None:
    gate = Gate("tok150")  # holds input 150 at the model: the batch is mid-way
    server = scripted(gate.script())
    items = make_inputs(COUNT)
    inputs = write_inputs(tmp_path / "in.jsonl", items)
    out = tmp_path / "out.jsonl"
    proc = _batch(server, inputs, out, "--jobs", "4")
    try:
        assert gate.arrived.wait(120)
        proc.send_signal(signal.SIGINT)  # Ctrl-C
        code, err = _finish(proc)
    finally:
        gate.release.set()
        if proc.poll() is None:
            proc.kill()
    assert code == 130, err
    assert "interrupted; run the same command again" in err
    first = read_results(out)
    assert 0 < len(first) < COUNT and '"q150"' not in first
    done_prompts = {prompt_of(i) for i in items if json.dumps(i["id"]) in first}
    for record in first.values():
        assert record["outcome"] == "exited" and record["exit_code"] == 0  # no cancelled runs

    server.clear_requests()
    code, err = _finish(_batch(server, inputs, out, "--jobs", "4"))
    assert code == 0, err
    assert f"{COUNT} inputs, {len(first)} already done, {COUNT - len(first)} run" in err
    final = read_results(out)
    check_results(final, items)
    assert {k: final[k] for k in first} == first  # earlier lines kept as they were
    # Nothing finished before the interrupt went to the model again.
    asked = {r.body["messages"][0]["content"] for r in server.requests if r.body}
    assert asked and not asked & done_prompts


def test_a_dying_worker_process_loses_no_input(tmp_path: Path, scripted: Any) -> None:
    gate = Gate("tok10")
    server = scripted(gate.script())
    items = make_inputs(40)
    out = tmp_path / "out.jsonl"
    executor = ProcessExecutor(2, 2)
    config = HostConfig(base_url=server.base_url, model="test-model", max_retries=0,
                        cache_dir=tmp_path / "cache")
    summary: list[Any] = []
    batch = threading.Thread(target=lambda: summary.append(run_batch(
        ECHO_WASM, write_inputs(tmp_path / "in.jsonl", items), out, executor, config=config)))
    batch.start()
    try:
        assert gate.arrived.wait(120)  # input 10 is running on one of the workers
        pids = executor.worker_pids()
        assert len(pids) == 2 and os.getpid() not in pids
        for pid in pids:
            os.kill(pid, signal.SIGKILL)
    finally:
        gate.release.set()
        batch.join(300)
    assert summary and summary[0].complete
    results = read_results(out)
    check_results(results, items)
    # Ran again on a replacement worker: resumed there from its journal by the
    # executor (attempts 1), or retried by the batch's dispatch (attempts 2).
    assert results['"q010"']["attempts"] in (1, 2)
    assert executor.workers_started >= 4  # two replacements
    # The workers found the module in the disk cache the parent filled
    # (a replacement may still be starting when the batch ends).
    assert executor.disk_cache_hits >= 2


def test_thread_executor_can_share_an_embedders_host(tmp_path: Path, scripted: Any,
                                                     make_host: Any) -> None:
    server = scripted(echo_script())
    host = make_host(base_url=server.base_url)
    items = make_inputs(12)
    summary = run_batch(ECHO_WASM, write_inputs(tmp_path / "in.jsonl", items),
                        tmp_path / "out.jsonl", ThreadExecutor(3, host=host),
                        config=host.config, transcripts=True)
    assert summary.complete and summary.outcomes == {"exited": 12}
    results = read_results(tmp_path / "out.jsonl")
    check_results(results, items)
    for item in items:
        [transcript] = results[json.dumps(item["id"])]["transcripts"]
        assert transcript["messages"][0] == {"role": "user", "content": prompt_of(item)}
    assert host.run(ECHO_WASM, ["still usable"]).ok  # the executor did not close it


@pytest.mark.parametrize("inputs_text, module, code, message", [
    ('{"id": 1}\n{"id": 1}\n', None, 2, "id 1 was already used on line 1"),
    ('{"id": 1}\n', b"\x00asm junk", 65, "not a valid wasm binary"),
])
def test_cli_errors(tmp_path: Path, scripted: Any, inputs_text: str, module: bytes | None,
                    code: int, message: str) -> None:
    inputs = tmp_path / "in.jsonl"
    inputs.write_text(inputs_text)
    wasm = ECHO_WASM
    if module is not None:
        wasm = tmp_path / "bad.wasm"
        wasm.write_bytes(module)
    command = [sys.executable, "-m", "spearpy", "batch", str(wasm), "--inputs", str(inputs),
               "--out", str(tmp_path / "out.jsonl"), "--base-url", "http://127.0.0.1:9/v1",
               "--no-cache", "--threads"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert done.returncode == code, done.stderr
    assert message in done.stderr
