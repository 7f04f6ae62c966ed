"""The worker-process example of docs/embedding.md, run as a real service."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx

from tests.test_embed_support import ECHO_WASM, ROOT, echo_script, expected_stdout

EXAMPLE = ROOT / "examples" / "agent_service.py"
DOC = ROOT / "docs" / "embedding.md"


def test_the_docs_show_the_example_that_is_tested() -> None:
    assert f"```python\n{EXAMPLE.read_text()}```" in DOC.read_text()


def test_agent_service_runs_a_guest_per_request(tmp_path: Path, scripted: Any) -> None:
    script = echo_script()
    # One prompt the model answers slowly, past the service's run timeout.
    script["rules"].insert(0, {"when": {"last_user_contains": "slow"},
                               "reply": {"content": "late", "delay_ms": 3000}})
    server = scripted(script)
    env = {**os.environ, "SPEARPY_CACHE_DIR": str(tmp_path / "cache")}
    proc = subprocess.Popen(
        [sys.executable, str(EXAMPLE), str(ECHO_WASM), "--base-url", server.base_url,
         "--model", "test-model", "--port", "0", "--run-timeout", "1"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()
        assert first.startswith("listening on http://127.0.0.1:"), proc.stderr
        url = first.split()[-1]

        def ask(argv: list[str]) -> dict[str, Any]:
            reply = httpx.post(f"{url}/run", json={"argv": argv}, timeout=60)
            assert reply.status_code == 200
            body: dict[str, Any] = reply.json()
            return body

        with ThreadPoolExecutor(9) as pool:
            slow = pool.submit(ask, ["slow"])
            answers = list(pool.map(ask, [[f"request-{i}"] for i in range(8)]))
        for i, answer in enumerate(answers):
            assert answer["outcome"] == "exited" and answer["exit_code"] == 0
            assert answer["stdout"] == expected_stdout(f"request-{i}")
        late = slow.result()
        assert (late["outcome"], late["exit_code"]) == ("cancelled", 130)
        assert httpx.post(f"{url}/nope", timeout=10).status_code == 404
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    prompts = [r.body["messages"][0]["content"] for r in server.requests if r.body]
    assert sorted(set(prompts)) == sorted({"slow", *(f"request-{i}" for i in range(8))})
