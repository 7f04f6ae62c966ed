"""Shared pieces of the embedding and batch tests (this module has no tests).

The guest is examples/guests/echo_agent.wat: prompt = $PROMPT_PREFIX + argv
joined by spaces + stdin; the scripted model makes it call its `echo` tool
with the prompt and answers with the tool's output, so every run's stdout
proves which input it saw.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import wasmtime

ROOT = Path(__file__).resolve().parent.parent
GUESTS = ROOT / "examples" / "guests"
ECHO_WAT = GUESTS / "echo_agent.wat"
ECHO_WASM = GUESTS / "echo_agent.wasm"
ECHO_SCRIPT_PATH = GUESTS / "echo_agent.script.json"
VOLATILE = ("elapsed_ms",)  # the only fields of a result line that may differ between runs

LOOP_WAT = """(module (memory (export "memory") 1)
  (func (export "_start") (loop $l (br $l))))"""
SLEEP_WAT = """(module (import "spear" "sleep_ms" (func $sleep (param i32)))
  (memory (export "memory") 1)
  (func (export "_start") (call $sleep (i32.const 2147483647))))"""


def wat(text: str) -> bytes:
    return bytes(wasmtime.wat2wasm(text))


def echo_wasm() -> bytes:
    return wat(ECHO_WAT.read_text())


def echo_script() -> dict[str, Any]:
    script: dict[str, Any] = json.loads(ECHO_SCRIPT_PATH.read_text())
    return script


def _compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def expected_stdout(prompt: str) -> str:
    """What echo_agent prints for `prompt`: the answer content as it appears
    inside the JSON body (the guest copies it without unescaping)."""
    content = "echo: " + _compact({"text": prompt})
    return json.dumps(content, ensure_ascii=False)[1:-1] + "\n"


def prompt_of(item: dict[str, Any]) -> str:
    """The prompt echo_agent builds from one batch input line."""
    env: dict[str, str] = item.get("env") or {}
    argv: list[str] = item.get("argv", [])
    stdin: str = item.get("stdin", "")
    return env.get("PROMPT_PREFIX", "") + " ".join(argv) + stdin


def make_inputs(count: int) -> list[dict[str, Any]]:
    """Inputs using every delivery: argv, stdin, env, and mixes of them."""
    items: list[dict[str, Any]] = []
    for i in range(count):
        item: dict[str, Any] = {"id": f"q{i:03d}", "argv": [f"tok{i}"]}
        if i % 4 == 1:
            item["stdin"] = f" stdin-{i}"
        if i % 4 == 2:
            item["env"] = {"PROMPT_PREFIX": f"env-{i}:"}
        if i % 4 == 3:
            item = {"id": i, "stdin": f"only stdin {i} \u00e9\u4e2d"}  # integer id, no argv
        items.append(item)
    return items


def write_inputs(path: Path, items: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(item) + "\n" for item in items))
    return path


def read_results(path: Path) -> dict[str, dict[str, Any]]:
    """Result lines by id (as JSON text), failing on duplicates."""
    results: dict[str, dict[str, Any]] = {}
    for line in path.read_text().splitlines():
        record = json.loads(line)
        key = json.dumps(record["id"])
        assert key not in results, f"duplicate result for {key}"
        results[key] = record
    return results


def stable(record: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in record.items() if k not in VOLATILE}


def check_results(results: dict[str, dict[str, Any]], items: list[dict[str, Any]]) -> None:
    assert len(results) == len(items)
    for item in items:
        record = results[json.dumps(item["id"])]
        assert record["outcome"] == "exited", record
        assert record["exit_code"] == 0, record
        assert record["stdout"] == expected_stdout(prompt_of(item)), record
        assert record["usage"]["total_tokens"] > 0


class Gate:
    """A reply callable that holds the first request whose prompt contains
    `marker` until `release` is set (later ones pass), so a test knows an
    input is in flight at the model and can act on its worker."""

    def __init__(self, marker: str) -> None:
        self.marker = marker
        self.arrived = threading.Event()
        self.release = threading.Event()
        self._lock = threading.Lock()
        self._held = False

    def matches(self, request: dict[str, Any]) -> bool:
        """A request the gate is for: the first of the input holding `marker`."""
        messages = request.get("messages", [])
        user = next((m.get("content") for m in messages if m.get("role") == "user"), "")
        return isinstance(user, str) and self.marker in user and len(messages) == 1

    def answer(self, request: dict[str, Any]) -> dict[str, Any]:
        return {"tool_calls": [{"name": "echo", "arguments": {"text": "{{last_user}}"}}]}

    def when(self, request: dict[str, Any]) -> bool:
        if not self.matches(request):
            return False
        with self._lock:
            first, self._held = not self._held, True
        return first

    def reply(self, request: dict[str, Any]) -> dict[str, Any]:
        self.arrived.set()
        self.release.wait(120)
        return self.answer(request)

    def script(self) -> dict[str, Any]:
        script = echo_script()
        script["rules"].insert(0, {"name": "gate", "when": self.when, "reply": self.reply})
        return script
