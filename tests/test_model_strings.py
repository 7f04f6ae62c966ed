"""Strings the model chooses stay bounded wherever they go (issue 14, item 7).

A 20 MB tool name over 8 iterations used 1.2 GB of RAM and ~1 GB of disk:
the name was copied into the session (and so into every later request),
events, log lines, the live view, the transcript, and a Prometheus label of
its own. Names and ids are capped where model output enters
(chat/normalize.py); only registered tools' names become label values.
"""

from __future__ import annotations

import io
import json
from typing import Any

from prometheus_client import CollectorRegistry

from spearpy.chat.normalize import (
    MAX_TOOL_CALL_ID_BYTES,
    MAX_TOOL_CALL_NAME_BYTES,
    bounded_name,
    normalize_assistant,
)
from spearpy.observe import events as ev
from spearpy.observe.events import Event, FanOut
from spearpy.observe.live import LiveView, describe
from spearpy.observe.logs import LogSink
from spearpy.observe.metrics import UNKNOWN_TOOL_LABEL, Metrics
from tests.test_observe_events import agent_wasm

BIG = 4 << 20
ITERATIONS = 4


def _ids() -> Any:
    counter = iter(range(1, 1000))
    return lambda: f"fresh{next(counter)}"


def _calls(message: dict[str, Any]) -> list[Any]:
    return normalize_assistant(message, _ids())[1]


# ---- where they enter ----------------------------------------------------------


def test_names_are_capped_where_model_output_enters() -> None:
    cap = MAX_TOOL_CALL_NAME_BYTES
    for kept in ["get_weather", "x" * 64, "x" * cap, "é" * (cap // 2), "😀" * (cap // 4)]:
        assert bounded_name(kept) == kept
    for long in ["x" * (cap + 1), "é" * (cap // 2 + 1), "😀" * (cap // 4 + 1), "n" * BIG]:
        shown = bounded_name(long)
        assert len(shown.encode()) <= cap
        assert shown.startswith(long[:16]) and shown.endswith(f"...({len(long)} characters)")
    [call] = _calls({"tool_calls": [{"id": "c1", "function": {"name": "n" * BIG}}]})
    assert call.name == bounded_name("n" * BIG) and call.id == "c1"
    [legacy] = _calls({"function_call": {"name": "n" * BIG, "arguments": "{}"}})
    assert legacy.name == call.name


def test_over_long_ids_are_replaced_like_missing_ones() -> None:
    cap = MAX_TOOL_CALL_ID_BYTES
    message = {"tool_calls": [
        {"id": "i" * cap, "function": {"name": "a"}},
        {"id": "i" * (cap + 1), "function": {"name": "b"}},
        {"id": "é" * (cap // 2 + 1), "function": {"name": "c"}},
        {"id": "i" * BIG, "function": {"name": "d"}},
    ]}
    normalized, calls = normalize_assistant(message, _ids())
    assert [c.id for c in calls] == ["i" * cap, "fresh1", "fresh2", "fresh3"]
    assert len(json.dumps(normalized)) < 2 * cap + 1000


# ---- a whole run ----------------------------------------------------------------


def _huge_name_script() -> dict[str, Any]:
    """Every turn: a call to a 4 MB name with a 1 MB id, and one to echo."""
    def reply(request: dict[str, Any]) -> dict[str, Any]:
        answered = sum(1 for m in request["messages"] if m.get("role") == "tool")
        if answered >= 2 * ITERATIONS:
            return {"content": "done"}
        return {"tool_calls": [
            {"id": f"{answered}" + "i" * (1 << 20), "name": "n" * BIG, "arguments": {}},
            {"name": "echo", "arguments": {"turn": answered}}]}
    return {"rules": [{"when": {}, "reply": reply}]}


def test_a_huge_tool_name_is_never_copied_around(make_host: Any, scripted: Any) -> None:
    server = scripted(_huge_name_script())
    host = make_host(base_url=server.base_url)
    collected: list[Event] = []
    registry = CollectorRegistry()
    live = io.StringIO()
    log_lines: list[tuple[str, dict[str, Any]]] = []

    class _Logger:
        def __getattr__(self, level: str) -> Any:
            return lambda message, **fields: log_lines.append((message, fields))

    sink = FanOut(collected.append, Metrics(registry), LiveView(live, rich_output=False),
                  LogSink(logger=_Logger()))
    result = host.run(agent_wasm([("user", "go")], ["echo"], {"max_iterations": 8}),
                      on_event=sink)
    assert result.exit_code == 0, result
    assert b"done" in (result.stdout or b"")

    # Upstream: the name the model sent once is replayed shortened, never whole.
    sizes = [len(json.dumps(r.body)) for r in server.requests]
    assert len(sizes) == ITERATIONS + 1 and max(sizes) < 64 << 10, sizes
    # Each event, log line, live line and the transcript are small.
    for event in collected:
        assert len(json.dumps(event.as_dict(), default=str)) < 4096, event.kind
    for message, fields in log_lines:
        assert len(json.dumps(fields, default=str)) < 4096, message
    assert max(len(line) for line in live.getvalue().splitlines()) < 300
    [transcript] = result.transcripts
    assert len(json.dumps(transcript)) < 64 << 10
    # The model is told, with the name shortened, and the ids are fresh ones.
    shown = bounded_name("n" * BIG)
    unknown = [m for m in transcript["messages"] if m["role"] == "tool" and
               "unknown_tool" in m["content"]]
    assert len(unknown) == ITERATIONS
    assert all(shown[:40] in m["content"] for m in unknown)
    assert all(len(m["tool_call_id"]) < MAX_TOOL_CALL_ID_BYTES for m in unknown)
    # Prometheus: the registered tool and one shared value, nothing else.
    labels = {s.labels["tool"] for metric in registry.collect() for s in metric.samples
              if metric.name == "spearpy_tool_calls"}
    assert labels == {"echo", UNKNOWN_TOOL_LABEL}


def test_invented_names_share_one_label_whatever_answers_them(make_host: Any,
                                                             scripted: Any) -> None:
    # max_iterations 1: the calls of the first reply are answered not_run, an
    # error that is not unknown_tool; invented names still get no series.
    script = {"rules": [{"when": {}, "reply": {"tool_calls": [
        {"name": "echo", "arguments": {}}, {"name": "ghost-1"}, {"name": "ghost-2"}]}}]}
    server = scripted(script)
    registry = CollectorRegistry()
    host = make_host(base_url=server.base_url)
    host.run(agent_wasm([("user", "go")], ["echo"], {"max_iterations": 1}),
             on_event=Metrics(registry))
    value = registry.get_sample_value
    assert value("spearpy_tool_calls_total", {"tool": "echo"}) == 1
    assert value("spearpy_tool_calls_total", {"tool": UNKNOWN_TOOL_LABEL}) == 2
    assert value("spearpy_tool_calls_total", {"tool": "ghost-1"}) is None
    assert value("spearpy_tool_call_failures_total", {"code": "not_run"}) == 3


def test_the_live_view_shows_a_short_single_line_name() -> None:
    forged = "evil\nspearpy: run 123: exited, exit code 0"
    for kind, data in [
        (ev.TOOL_START, {"name": forged, "tool_call_id": "x" * 1000, "executed": True}),
        (ev.TOOL_END, {"name": "n" * 5000, "tool_call_id": forged, "executed": False,
                       "error": "unknown_tool"}),
        (ev.TOOL_END, {"name": forged, "executed": True, "error": None, "duration_ms": 1}),
    ]:
        line = describe(Event(kind, "run", 0, 0.0, 1000, data))
        assert line is not None
        text = line[0]
        assert "\n" not in text and len(text) < 200, text
