"""The values the loop's hot sites build field by field (new_value and one
store per field, issue 19 P5) are whole: every field of the dataclass is set,
and each object equals the one calling the class with those fields builds.
A field added to ToolCall, Complete, CallTool or ToolOutcome and not to those
sites fails here."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import wasmtime

from spearpy import _native
from spearpy.chat.normalize import normalize_assistant
from spearpy.chat.protocol import CallTool, Complete, ToolCall
from spearpy.guestcall import call_tool
from tests.probe import Probe
from tests.test_fast_paths import _GROWER
from tests.test_loop_fast_paths import _drive


def _whole(value: Any) -> None:
    names = [field.name for field in dataclasses.fields(value)]
    for name in names:
        assert hasattr(value, name), f"{type(value).__name__}.{name} is not set"
    rebuilt = type(value)(**{name: getattr(value, name) for name in names})
    assert rebuilt == value
    assert repr(rebuilt) == repr(value)


def test_the_loops_actions_are_whole() -> None:
    _final, actions, _messages, _size = _drive(True)
    kinds = {type(action) for action in actions}
    assert kinds == {Complete, CallTool}
    for action in actions:
        _whole(action)
        if isinstance(action, CallTool):
            _whole(action.call)
            assert action.arguments == action.call.arguments


def test_normalized_calls_are_whole() -> None:
    message = {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "add", "arguments": "{}"}},
        {"type": "function", "function": {"name": "x", "arguments": {"a": 1}}},
    ]}
    _normalized, calls = normalize_assistant(message, iter(["n1", "n2"]).__next__)
    assert calls == [ToolCall("c1", "add", "{}"), ToolCall("n1", "x", '{"a":1}')]
    for call in calls:
        _whole(call)


def test_a_guest_tools_outcome_is_whole(make_host: Any) -> None:
    probe = Probe(make_host(base_url="http://127.0.0.1:9/v1"),
                  bytes(wasmtime.wat2wasm(_GROWER)))
    previous = _native.enter_run(probe.run)
    try:
        args = json.dumps({"text": "y"})
        outcome = call_tool(probe.run, 0, args, 65536, (1024, 4096))
        assert outcome.ok and outcome.output == args and outcome.rc == 0
        assert outcome.error_code is None and outcome.error_message is None
        assert outcome.duration_ms >= 0.0
        _whole(outcome)
    finally:
        _native.enter_run(previous)
        probe.close()
