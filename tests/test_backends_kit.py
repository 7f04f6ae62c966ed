"""Shared helpers of the backend tests (no tests here): config files, servers
speaking a dialect, and the multi-tool sample with what it must produce."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from spearpy.host import Host
from spearpy.outcome import RunResult

ROOT = Path(__file__).resolve().parents[1]
MULTI_WASM = ROOT / "wasm-samples" / "c_multi_tool.wasm"
MULTI_SCRIPT = ROOT / "wasm-samples" / "scripts" / "multi_tool.json"

# What c_multi_tool prints when every tool call arrives as scripted.
MULTI_STDOUT = (
    "duplicate add: EEXIST\n"
    "tool add(2, 3)\n"
    "tool mul(5, 4)\n"
    "tool add(20, 0)\n"
    "tool upper(DONE)\n"
    'answer: (2 + 3) * 4 = 20, and {"text":"DONE"}\n'
    "tools run: 4, metrics: iterations=4 tool_calls=4\n"
)
MULTI_CALLS = [
    ("add", {"a": 2, "b": 3}),
    ("mul", {"a": 5, "b": 4}),
    ("add", {"a": 20, "b": 0}),
    ("upper", {"text": "done"}),
]


def toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    return json.dumps(str(value))  # a JSON string is a valid TOML basic string


def write_config(path: Path, backends: dict[str, dict[str, Any]],
                 default: str | None = None) -> Path:
    lines = [f"default = {toml_value(default)}"] if default is not None else []
    for name, table in backends.items():
        lines.append(f"\n[backends.{name}]")
        lines += [f"{k} = {toml_value(v)}" for k, v in table.items() if v is not None]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture
def dialect_server(scripted: Any) -> Any:
    """dialect_server(script, dialect=None, api_key=None, **options) -> a started server
    (conftest's `scripted`, under the name these tests read best with)."""
    return scripted


@pytest.fixture
def hosts() -> Iterator[Any]:
    """hosts(**config) -> a Host closed after the test (no disk cache, no retries)."""
    made: list[Host] = []

    def make(**config: Any) -> Host:
        config.setdefault("cache_dir", None)
        config.setdefault("max_retries", 0)
        host = Host(**config)
        made.append(host)
        return host

    yield make
    for host in made:
        host.close()


def tool_calls(result: RunResult) -> list[tuple[str, Any]]:
    """(name, parsed arguments) of every tool call in the run's sessions, in order."""
    calls = []
    for transcript in result.transcripts:
        for message in transcript["messages"]:
            for call in message.get("tool_calls") or []:
                fn = call["function"]
                calls.append((fn["name"], json.loads(fn["arguments"])))
    return calls


def call_ids(result: RunResult) -> list[str]:
    return [call["id"] for t in result.transcripts for m in t["messages"]
            for call in m.get("tool_calls") or []]
