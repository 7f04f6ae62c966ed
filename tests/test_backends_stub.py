"""SPEAR's `stub` backend (kind `stub`): a real guest answered offline, the
same way every time, without a single socket, and a recording of it replays.

These failed before the kind existed (`kind = "stub"` was a config error).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from spearpy.backends.base import CompletionRequest
from spearpy.backends.stub import StubBackend
from tests.test_backends_kit import hosts, write_config

__all__ = ["hosts"]  # a fixture used below

ROOT = Path(__file__).resolve().parents[1]
C_CHAT = ROOT / "wasm-samples" / "c_chat.wasm"
ANSWER = "assistant: stub chat completion: Say hello to the wasm guest."


def _config(tmp_path: Path) -> Path:
    return write_config(tmp_path / "c.toml", {"offline": {"kind": "stub"}}, default="offline")


def test_a_guest_is_answered_by_the_stub_the_same_way_every_time(
        tmp_path: Path, hosts: Any) -> None:
    host = hosts(config_file=_config(tmp_path))
    first, second = host.run(C_CHAT), host.run(C_CHAT)
    assert first.exit_code == 0, first.stderr
    assert ANSWER in (first.stdout or b"").decode()
    assert first.stdout == second.stdout
    assert first.transcripts[0]["messages"][-1] == {
        "role": "assistant", "content": ANSWER.removeprefix("assistant: ")}


_NO_NETWORK = """
import json, sys
opened = []
def watch(event, args):
    if event.split(".")[0] == "socket":
        opened.append(event)
sys.addaudithook(watch)
from spearpy.host import Host
with Host(config_file=sys.argv[1], cache_dir=None) as host:
    result = host.run(sys.argv[2])
print(json.dumps({"opened": opened, "exit": result.exit_code,
                  "stdout": (result.stdout or b"").decode()}))
"""


def test_the_stub_opens_no_socket(tmp_path: Path) -> None:
    # Every socket Python makes, resolves or connects raises an audit event
    # (socket.__new__, socket.getaddrinfo, socket.connect, ...): none may fire.
    done = subprocess.run([sys.executable, "-c", _NO_NETWORK, str(_config(tmp_path)),
                           str(C_CHAT)], capture_output=True, text=True, cwd=ROOT,
                          timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.splitlines()[-1])
    assert seen["exit"] == 0 and ANSWER in seen["stdout"]
    assert seen["opened"] == []


def test_a_recording_of_a_stub_run_replays(tmp_path: Path, hosts: Any) -> None:
    cassette = tmp_path / "run.cassette.json"
    live = hosts(config_file=_config(tmp_path), record=str(cassette)).run(C_CHAT)
    assert json.loads(cassette.read_text())["backends"]["offline"]["kind"] == "stub"
    replayed = hosts(backend=f"replay:{cassette}").run(C_CHAT)
    assert replayed.exit_code == 0, replayed.stderr
    assert replayed.stdout == live.stdout and ANSWER in (live.stdout or b"").decode()


def test_what_the_stub_answers() -> None:
    stub = StubBackend(name="s")
    deltas: list[str] = []
    parts: list[dict[str, Any]] = [{"role": "system", "content": "sys"},
             {"role": "user", "content": [{"type": "text", "text": "two "},
                                          {"type": "text", "text": "parts"}]},
             {"role": "assistant", "content": "x"}]
    body = stub.complete(CompletionRequest(model="m", messages=parts, stream=True,
                                           on_delta=deltas.append)).body
    assert body is not None and body["model"] == "m"
    assert body["choices"] == [{"index": 0, "finish_reason": "stop", "message": {
        "role": "assistant", "content": "stub chat completion: two parts"}}]
    assert body["usage"] == {"prompt_tokens": 4, "completion_tokens": 5, "total_tokens": 9}
    assert deltas == ["stub chat completion: two parts"]
    alone = stub.complete(CompletionRequest(model="", messages=[{"role": "system",
                                                                 "content": "s"}]))
    assert alone.body is not None and alone.model == "stub"
    assert alone.body["choices"][0]["message"]["content"] == "stub chat completion"


def test_backend_stub_and_ollama_are_flags_too(tmp_path: Path) -> None:
    """SPEAR's kinds without a config file: `--backend stub` answers offline,
    `--backend ollama --base-url URL` talks Ollama's own API (no key)."""
    from tests.ollama_server import OllamaServer

    env = {k: v for k, v in os.environ.items()
           if k not in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "SPEARPY_CONFIG")}
    env["XDG_CONFIG_HOME"] = str(tmp_path)
    stub = subprocess.run([sys.executable, "-m", "spearpy", "run", "--backend", "stub",
                           str(C_CHAT)], capture_output=True, text=True, cwd=ROOT, env=env,
                          timeout=120, check=False)
    assert stub.returncode == 0, stub.stderr
    assert "stub chat completion" in stub.stdout
    with OllamaServer() as ollama:
        native = subprocess.run([sys.executable, "-m", "spearpy", "run", "--backend", "ollama",
                                 "--base-url", ollama.base_url, "--model", "llama3:latest",
                                 str(C_CHAT)], capture_output=True, text=True, cwd=ROOT,
                                env=env, timeout=120, check=False)
        assert native.returncode == 0, native.stderr
        assert "hello" in native.stdout
        assert [c["model"] for c in ollama.chats()] == ["llama3:latest"]
    unknown = subprocess.run([sys.executable, "-m", "spearpy", "run", "--backend", "gemini",
                              str(C_CHAT)], capture_output=True, text=True, cwd=ROOT, env=env,
                             timeout=120, check=False)
    assert unknown.returncode == 2 and "ollama, stub" in unknown.stderr
