"""The `parallel` field of a batch's tool events (and so the run page's
"parallel xN" badge) says how many of the batch's calls may run at once, not
how many it has: six Python calls under max_parallel_tools 2 say 2, and the
guest's own calls add the one running on the guest's thread beside the
workers. Before the fix both said the batch's size, 6. (A journaled batch,
where a guest call runs alone: test_parallel_tools.py's mixed batch.)

A real guest (probe.wat), the loopback OpenAI-compatible server, real
Python functions (test_parallel_tools.py's world)."""

from __future__ import annotations

from spearpy.host import Host
from spearpy.observe import events as ev
from tests.test_parallel_tools import (
    Gate,
    calls_then_answer,
    gate,
    host,
    send,
    tool_events,
    upstream,
)

__all__ = ["gate", "host", "upstream"]  # test_parallel_tools.py's fixtures


def _parallel(events: list[ev.Event]) -> list[object]:
    return [e.get("parallel") for kind in (ev.TOOL_START, ev.TOOL_END)
            for e in tool_events(events, kind)]


def test_six_calls_two_at_a_time_say_two(host: Host, gate: Gate) -> None:
    script = calls_then_answer(*[("pair", {"i": i, "n": 6}) for i in range(6)])
    body, events, _requests = send(host, script, params={"max_parallel_tools": 2}, mcp=False)
    assert body["choices"][0]["message"]["content"] == "done", body
    assert gate.most == 2
    assert _parallel(events) == [2] * 12


def test_the_guests_calls_add_the_one_on_the_guests_thread(host: Host, gate: Gate) -> None:
    script = calls_then_answer(("echo", {"x": 1}), *[("pair", {"i": i, "n": 4})
                                                     for i in range(4)], ("echo", {"x": 2}))
    body, events, _requests = send(host, script, params={"max_parallel_tools": 2},
                                   guest_tools=True, mcp=False)
    assert body["choices"][0]["message"]["content"] == "done", body
    assert _parallel(events) == [3] * 12
