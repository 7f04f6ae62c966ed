"""`spearpy batch --ray`: on a local Ray cluster started by the test, results
match local mode, a killed worker loses no input, and traps stay traps.
Skipped without the [ray] extra."""

from __future__ import annotations

import importlib.util
import os
import secrets
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from spearpy import HostConfig
from spearpy.batch import BatchInput, RayExecutor, ThreadExecutor, run_batch
from tests.test_embed_support import (
    ECHO_WASM,
    Gate,
    check_results,
    echo_script,
    make_inputs,
    read_results,
    stable,
    wat,
    write_inputs,
)

# Checked without importing Ray: it reads its auth settings at import, and
# the cluster fixture sets them first (RayExecutor imports it when it runs).
pytestmark = pytest.mark.skipif(importlib.util.find_spec("ray") is None,
                                reason="needs the [ray] extra")
COUNT = 200


# The cluster lives in a process of its own: a Ray driver replaces the crash
# signal handlers wasmtime turns into traps, and this process runs guests.
_HOLD_A_CLUSTER = """
import sys, ray
ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
print(ray.get_runtime_context().gcs_address, flush=True)
sys.stdin.read()
ray.shutdown()
"""


@pytest.fixture(scope="module")
def cluster() -> Iterator[str]:
    """A two-CPU local Ray cluster started for these tests; yields its address.

    Token authentication stays on, with a token of this test's own in the
    environment (inherited by the `spearpy batch` subprocesses), so nothing
    is read from or written to ~/.ray."""
    with pytest.MonkeyPatch.context() as env:
        env.setenv("RAY_AUTH_MODE", "token")
        env.setenv("RAY_AUTH_TOKEN", secrets.token_hex(32))
        env.delenv("RAY_AUTH_TOKEN_PATH", raising=False)
        env.delenv("RAY_ADDRESS", raising=False)
        holder = subprocess.Popen([sys.executable, "-c", _HOLD_A_CLUSTER],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        try:
            assert holder.stdout is not None
            address = holder.stdout.readline().strip()
            assert address, "the Ray cluster did not start"
            yield address
        finally:
            assert holder.stdin is not None
            holder.stdin.close()  # the holder shuts its cluster down and exits
            try:
                holder.wait(120)
            except subprocess.TimeoutExpired:
                holder.kill()
                holder.wait()


def _cli(server: Any, inputs: Path, out: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "spearpy", "batch", str(ECHO_WASM), "--inputs", str(inputs),
               "--out", str(out), "--base-url", server.base_url, "--model", "test-model",
               "--max-retries", "0", "--no-cache", "--jobs", "4", *extra]
    return subprocess.run(command, capture_output=True, text=True, timeout=600)


def test_ray_results_match_local_mode(tmp_path: Path, scripted: Any, cluster: str) -> None:
    server = scripted(echo_script())
    items = make_inputs(COUNT)
    inputs = write_inputs(tmp_path / "in.jsonl", items)
    local = _cli(server, inputs, tmp_path / "local.jsonl", "--threads")
    assert local.returncode == 0, local.stderr
    on_ray = _cli(server, inputs, tmp_path / "ray.jsonl", "--ray", cluster)
    assert on_ray.returncode == 0, on_ray.stderr
    assert f"Ray cluster {cluster}" in on_ray.stderr
    ray_results = read_results(tmp_path / "ray.jsonl")
    check_results(ray_results, items)
    assert {k: stable(v) for k, v in ray_results.items()} == {
        k: stable(v) for k, v in read_results(tmp_path / "local.jsonl").items()}


def test_a_killed_ray_worker_loses_no_input(tmp_path: Path, scripted: Any,
                                            cluster: str) -> None:
    gate = Gate("tok10")
    server = scripted(gate.script())
    items = make_inputs(40)
    out = tmp_path / "out.jsonl"
    executor = RayExecutor(cluster, 4)
    config = HostConfig(base_url=server.base_url, model="test-model", max_retries=0,
                        cache_dir=None)
    summary: list[Any] = []

    def run() -> None:
        try:
            summary.append(run_batch(ECHO_WASM, write_inputs(tmp_path / "in.jsonl", items), out,
                                     executor, config=config))
        except BaseException as exc:
            summary.append(exc)
            gate.arrived.set()

    batch = threading.Thread(target=run)
    batch.start()
    try:
        assert gate.arrived.wait(120)  # input 10 is running inside one of the actors
        assert not summary, summary
        pids = executor.worker_pids()
        assert pids and os.getpid() not in pids
        for pid in pids:
            os.kill(pid, signal.SIGKILL)
    finally:
        gate.release.set()
        batch.join(300)
    assert summary and summary[0].complete
    results = read_results(out)
    check_results(results, items)
    # Journaled (the default): resumed from its journal on another actor by
    # the executor (attempts 1), or retried by the batch's dispatch (attempts 2).
    assert results['"q010"']["attempts"] in (1, 2)
    assert executor._runs is not None and executor._runs.workers_lost >= 1


def test_traps_stay_traps_on_ray_and_in_the_driver(tmp_path: Path, cluster: str,
                                                   make_host: Any) -> None:
    trap = wat('(module (memory (export "memory") 1) (func (export "_start") unreachable))')
    items = [BatchInput(index=i, line=i + 1, id=i) for i in range(4)]
    config = HostConfig(base_url="http://127.0.0.1:9/v1", model="m", cache_dir=None)
    outcomes = {}
    for name, executor in (("ray", RayExecutor(cluster, 2)), ("local", ThreadExecutor(2))):
        out = tmp_path / f"{name}.jsonl"
        assert run_batch(trap, items, out, executor, config=config).complete
        outcomes[name] = {k: stable(v) for k, v in read_results(out).items()}
    assert outcomes["ray"] == outcomes["local"]
    assert {r["outcome"] for r in outcomes["ray"].values()} == {"trap"}
    # This process connected to Ray and left again: Ray's crash reporters
    # must not have replaced the handlers that turn wasm traps into results.
    assert make_host().run(trap).outcome == "trap"
