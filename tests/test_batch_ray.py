"""`spearpy batch --ray`: on a local Ray cluster started by the test, results
match local mode and a killed worker loses no input. Skipped without the
[ray] extra."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from spearpy import HostConfig
from spearpy.batch import RayExecutor, run_batch
from tests.test_embed_support import (
    ECHO_WASM,
    Gate,
    check_results,
    echo_script,
    make_inputs,
    read_results,
    stable,
    write_inputs,
)

ray = pytest.importorskip("ray")
COUNT = 200


@pytest.fixture(scope="module")
def cluster() -> Iterator[str]:
    """A two-CPU local cluster owned by this test process; its address lets a
    `spearpy batch` subprocess join it as a client."""
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        yield str(ray.get_runtime_context().gcs_address)
    finally:
        ray.shutdown()


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
    batch = threading.Thread(target=lambda: summary.append(run_batch(
        ECHO_WASM, write_inputs(tmp_path / "in.jsonl", items), out, executor, config=config)))
    batch.start()
    try:
        assert gate.arrived.wait(120)  # input 10 is running inside one of the actors
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
    assert results['"q010"']["attempts"] == 2  # retried on the restarted actor
    assert executor.lost_runs >= 1
