"""The loopback model for the HTTP scenarios: spearpy's scripted server in its
own process (so its work does not share the GIL with the side being timed),
and the bare httpx client the iteration overhead is measured against."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import httpx

from spearpy.backends.base import Backend
from spearpy.host import Host


def tool_script(tool_iterations: int, delay_ms: int = 0) -> dict[str, Any]:
    """The model asks for `sum` until the conversation holds `tool_iterations`
    tool answers, then answers in text."""
    rules: list[dict[str, Any]] = [
        {"when": {"tool_messages": i, "has_tools": True},
         "reply": {"tool_calls": [{"name": "sum", "arguments": {"a": i, "b": 35}}],
                   "delay_ms": delay_ms}}
        for i in range(tool_iterations)
    ]
    return {"rules": rules,
            "default": {"content": "The sum is {{last_tool}}.", "delay_ms": delay_ms}}


class ServerProcess:
    """`python -m spearpy.testing SCRIPT` on 127.0.0.1, stopped on exit."""

    def __init__(self, script: dict[str, Any] | None, argv: list[str] | None = None) -> None:
        """`script` for the scripted server, or `argv` for another server that
        prints its base URL on its first line."""
        self._dir = tempfile.TemporaryDirectory(prefix="spearpy-bench-")
        if argv is None:
            path = Path(self._dir.name) / "script.json"
            path.write_text(json.dumps(script))
            argv = [sys.executable, "-m", "spearpy.testing", str(path), "--host", "127.0.0.1"]
        self._proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                      text=True)
        assert self._proc.stdout is not None
        line = self._proc.stdout.readline().strip()
        if not line.startswith("http://127.0.0.1:"):
            self.close()
            raise RuntimeError(f"the scripted server did not start: {line!r}")
        self.base_url = line

    def close(self) -> None:
        self._proc.terminate()
        try:
            self._proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        self._dir.cleanup()

    def __enter__(self) -> ServerProcess:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()


class BareClient:
    """What any Python program pays for the same exchange: one keep-alive
    httpx client posting prepared bytes and reading the answer."""

    def __init__(self, base_url: str) -> None:
        self._client = httpx.Client(trust_env=False)
        self._url = base_url.rstrip("/") + "/chat/completions"
        self._headers = {"Content-Type": "application/json", "Accept": "application/json"}

    def post(self, body: bytes) -> bytes:
        response = self._client.post(self._url, content=body, headers=self._headers)
        if response.status_code != 200:
            raise RuntimeError(f"HTTP {response.status_code}: {response.text[:200]}")
        return response.content

    def close(self) -> None:
        self._client.close()


def install_backend(host: Host, backend: Backend) -> None:
    """Make `backend` the host's default backend."""
    host.use_backend(backend)
