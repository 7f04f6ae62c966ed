"""A tool schema's regular expressions never hang the host: `pattern` and
`patternProperties` run with the GIL released and within a time budget, and
otherwise give jsonschema's own verdicts.

The attack: a guest (or an MCP server) declares a pattern that backtracks
catastrophically, and the model (hostile, or just unlucky) answers with the
text that makes it do so. With Python's `re` that one validation held the
GIL for hours and stopped every run of the host."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import jsonschema
import pytest

from spearpy import abi
from spearpy.chat.patterns import PATTERN_BUDGET_S
from spearpy.chat.registry import Tool, ToolRegistry, parse_tool_schema, schema_problem
from spearpy.testing import ScriptedServer
from tests.probe import Probe

# Exponential for a backtracking engine: each extra "a" multiplies the work.
EVIL = "^(a|aa)+$"
EVIL_TEXT = "a" * 60 + "!"


def tool(parameters: dict[str, Any], name: str = "t") -> Tool:
    raw = json.dumps({"type": "function", "function": {"name": name,
                                                       "parameters": parameters}})
    tool_name, spec = parse_tool_schema(raw.encode())
    return ToolRegistry().add(tool_name, 0, spec)


def finished_within(seconds: float, work: Any) -> tuple[bool, Any]:
    """Run `work` on a thread: whether it ended within `seconds`, its result.
    A hang guard, not a speed check: the budget is a fraction of a second."""
    out: list[Any] = []
    thread = threading.Thread(target=lambda: out.append(work()), daemon=True)
    thread.start()
    thread.join(seconds)
    return not thread.is_alive(), out[0] if out else None


@pytest.mark.parametrize("parameters, arguments", [
    ({"type": "object", "properties": {"s": {"type": "string", "pattern": EVIL}}},
     {"s": EVIL_TEXT}),
    ({"type": "object", "patternProperties": {EVIL: {"type": "integer"}}},
     {EVIL_TEXT: 1}),
    ({"type": "object", "patternProperties": {EVIL: {}}, "additionalProperties": False},
     {EVIL_TEXT: 1}),
    ({"type": "object", "propertyNames": {"pattern": EVIL}}, {EVIL_TEXT: 1}),
    ({"type": "array", "items": {"type": "string", "pattern": EVIL}}, [EVIL_TEXT] * 50),
], ids=["pattern", "patternProperties", "additionalProperties", "propertyNames", "many"])
def test_a_catastrophic_pattern_ends_within_its_budget(parameters: dict[str, Any],
                                                       arguments: Any) -> None:
    ended, why = finished_within(60, lambda: tool(parameters).validate(arguments))
    assert ended, "validation hung"
    assert why is not None and "took longer than" in why and EVIL in why


def test_other_threads_run_while_a_pattern_is_matched() -> None:
    hostile = tool({"type": "object", "properties": {"s": {"type": "string",
                                                           "pattern": EVIL}}})
    ticks = 0
    stop = threading.Event()

    def count() -> None:
        nonlocal ticks
        while not stop.is_set():
            ticks += 1

    def python_busy(seconds: float) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            pass

    def rate_during(work: Any) -> tuple[float, float]:
        """The counter's ticks per second while this thread does `work`, and how long it took."""
        started, before = time.monotonic(), ticks
        work()
        elapsed = time.monotonic() - started
        return (ticks - before) / elapsed, elapsed

    counter = threading.Thread(target=count)
    counter.start()
    try:
        # The baseline: this thread busy in Python, wanting the GIL and a core
        # as the matcher does. Both rates are taken back to back, so the
        # machine's load (2 cores shared by several test runs) weighs on both.
        contended, _ = rate_during(lambda: python_busy(0.25))
        during, elapsed = rate_during(lambda: hostile.validate({"s": EVIL_TEXT}))
    finally:
        stop.set()
        counter.join()
    assert elapsed >= PATTERN_BUDGET_S * 0.9  # really a quarter of a second in the engine
    # With `re` the GIL stayed with the matcher and the counter stood still
    # (a rate near 0); with the GIL released it keeps about the baseline's
    # pace or better. A fifth of the baseline leaves room for a loaded machine.
    assert during > 0.2 * contended, (during, contended, elapsed)


CASES: list[tuple[dict[str, Any], list[Any]]] = [
    ({"type": "object", "properties": {"s": {"type": "string", "pattern": "^[a-z]+[0-9]?$"}}},
     [{"s": "abc"}, {"s": "abc1"}, {"s": "1abc"}, {"s": ""}, {"s": 5}, {}]),
    ({"type": "object", "patternProperties": {"^x_": {"type": "integer"}, "y$": {}},
      "additionalProperties": False},
     [{"x_a": 1}, {"x_a": "1"}, {"ay": "z"}, {"b": 1}, {"x_a": 1, "b": 2}, {}]),
    ({"type": "object", "patternProperties": {"^n": {"type": "number"}},
      "additionalProperties": {"type": "string"}, "properties": {"k": {"type": "boolean"}}},
     [{"n1": 2, "z": "s"}, {"n1": "x"}, {"z": 3}, {"k": True}, {"k": "no"}]),
    ({"type": "object", "propertyNames": {"pattern": "^[a-z_]+$"}},
     [{"ok_name": 1}, {"Bad": 1}, {}]),
    ({"type": "string", "pattern": "colou?r"}, ["color", "the colour", "colr", 3]),
]


@pytest.mark.parametrize("parameters, instances", CASES)
def test_verdicts_are_jsonschemas_own(parameters: dict[str, Any],
                                      instances: list[Any]) -> None:
    ours = tool(parameters)
    stock = jsonschema.validators.validator_for(parameters)(parameters)
    for instance in instances:
        assert (ours.validate(instance) is None) == stock.is_valid(instance), instance


def test_a_schema_jsonschema_would_match_with_re_is_refused() -> None:
    parameters = {"type": "object", "patternProperties": {EVIL: {}},
                  "properties": {"a": {"unevaluatedProperties": False}}}
    problem = schema_problem(parameters)
    assert problem is not None and "unevaluatedProperties" in problem
    assert schema_problem({"type": "object", "unevaluatedProperties": False}) is None


@pytest.mark.parametrize("where", ["pattern", "patternProperties"])
def test_a_pattern_too_long_to_compile_quickly_is_refused(where: str) -> None:
    long = "(?:ab|cd)" * 500  # 4500 characters
    node: dict[str, Any] = ({"type": "string", "pattern": long} if where == "pattern"
                            else {"type": "object", "patternProperties": {long: {}}})
    problem = schema_problem({"type": "object", "properties": {"x": node}})
    assert problem is not None and "4500 characters" in problem
    node_ok = {"type": "string", "pattern": "(?:ab|cd)" * 400}
    assert schema_problem({"type": "object", "properties": {"x": node_ok}}) is None


def completion(arguments: str | None, content: str | None = None) -> str:
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if arguments is not None:
        message["tool_calls"] = [{"id": "call_1", "type": "function",
                                  "function": {"name": "echo", "arguments": arguments}}]
    return json.dumps({"id": "c", "object": "chat.completion", "model": "m", "choices": [
        {"index": 0, "message": message,
         "finish_reason": "tool_calls" if arguments else "stop"}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}})


def test_a_guest_schema_and_a_model_reply_cannot_stall_the_run(make_host: Any,
                                                               probe: Any) -> None:
    """End to end: a guest registers the pattern, the model sends the text;
    the send finishes, the tool is never called, the model is told why."""
    script = {"rules": [
        {"when": {"request_index": 0},
         "reply": {"body_text": completion(json.dumps({"q": EVIL_TEXT}))}},
        {"when": {"request_index": 1}, "reply": {"body_text": completion(None, "gave up")}},
    ]}
    schema = {"type": "function", "function": {"name": "echo", "parameters": {
        "type": "object", "properties": {"q": {"type": "string", "pattern": EVIL}}}}}
    with ScriptedServer(script) as server:
        guest: Probe = probe(make_host(base_url=server.base_url))
        fd = guest.hc("cchat_create")
        assert guest.write_fn(fd, 0, schema) == 0
        assert guest.write_msg(fd, "user", "go") == 0
        ended, sent = finished_within(
            60, lambda: guest.hc("cchat_send", fd, abi.SEND_AUTO_TOOL_CALL))
        assert ended, "the send hung"
        body = json.loads(guest.recv(sent)[1])
        asked = server.requests[1].body
    assert asked is not None
    told = asked["messages"][-1]
    assert body["choices"][0]["message"]["content"] == "gave up"
    assert told["role"] == "tool" and "took longer than" in told["content"]
    assert f"{PATTERN_BUDGET_S:g} s" in told["content"]
