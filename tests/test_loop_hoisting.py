"""What a send takes once instead of on every loop step (issue 19, P5) agrees
with what the step used to ask for each time: the registry's name table with
`get`, a guest source's arena with the session's params, Usage.add's plain
case with the count-by-count rule."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from spearpy.chat.protocol import CallBudget, Usage
from spearpy.chat.registry import ToolRegistry, parse_tool_schema
from spearpy.tools.guest import GuestTools, tool_arena


def _spec(name: str) -> dict[str, Any]:
    return parse_tool_schema(json.dumps({"name": name}).encode())[1]


def test_by_name_answers_what_get_answers() -> None:
    registry = ToolRegistry()
    for name in ("add", "clash"):
        registry.add(name, 1, _spec(name))
    table = registry.by_name()
    assert set(table) == {"add", "clash"}
    attached = [ToolRegistry.build(name, name, _spec(name), source=_NoSource())
                for name in ("clash", "mcp_a", "mcp_b")]
    # Aliases: one to an attached tool, one named like a guest tool, one like
    # another attached tool, one to a tool that was left out.
    registry.attach("mcp", attached, {"a": "mcp_a", "add": "mcp_a", "mcp_b": "mcp_a",
                                      "gone": "clash"})
    table = registry.by_name()
    names = ["add", "clash", "mcp_a", "mcp_b", "a", "gone", "nope", ""]
    assert {name: table.get(name) for name in names} == \
        {name: registry.get(name) for name in names}
    assert registry.by_name() is table  # kept until the tools change
    registry.add("late", 3, _spec("late"))
    assert registry.by_name().get("late") is registry.get("late") is not None


class _NoSource:
    kind = "python"

    def call(self, ref: Any, arguments: str, budget: CallBudget) -> Any:
        raise AssertionError("not called")


def _reference_add(usage: Usage, raw: object) -> None:
    """Usage.add before the plain case was decided at once: field by field."""
    if not isinstance(raw, dict):
        return
    for key in ("prompt_tokens", "completion_tokens", "total_tokens"):
        value = raw.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            setattr(usage, key, getattr(usage, key) + value)


_COUNT = st.one_of(st.integers(-3, 10**12), st.booleans(), st.none(), st.floats(0, 10),
                   st.text(max_size=2))


@given(st.one_of(st.dictionaries(st.sampled_from(["prompt_tokens", "completion_tokens",
                                                  "total_tokens", "other"]), _COUNT),
                 st.none(), st.lists(st.integers(), max_size=2)),
       st.integers(0, 100))
def test_usage_add_agrees_with_count_by_count(raw: object, start: int) -> None:
    got, expected = Usage(start, start, start), Usage(start, start, start)
    got.add(raw)
    _reference_add(expected, raw)
    assert got == expected


@given(st.dictionaries(st.sampled_from(["tool_arena_ptr", "tool_arena_len", "x"]),
                       st.one_of(st.integers(-5, 1 << 20), st.booleans(), st.text(max_size=1))))
def test_tool_arena_is_read_from_params_as_before(params: dict[str, Any]) -> None:
    ptr, length = params.get("tool_arena_ptr"), params.get("tool_arena_len")
    before = (ptr, length) if isinstance(ptr, int) and isinstance(length, int) and \
        length > 0 else None
    assert tool_arena(params) == before


def test_guest_source_takes_the_arena_once_per_budget(monkeypatch: Any) -> None:
    import spearpy.guestcall as guestcall

    reads: list[Any] = []

    def counted(params: Any) -> Any:
        reads.append(dict(params))
        return tool_arena(params)

    monkeypatch.setattr(guestcall, "tool_arena", counted)
    # A run whose table holds no tool: each call fails after taking its arena.
    run = SimpleNamespace(interrupts=SimpleNamespace(tool_timeout=None), tool_funcs={},
                          tool_function=lambda index: None)
    source = GuestTools(run=run)  # type: ignore[arg-type]
    first = CallBudget(100, params={"tool_arena_ptr": 8, "tool_arena_len": 64})
    arenas = []
    for budget in (first, first, CallBudget(100, params={}), first):
        outcome = source.call(1, "{}", budget)
        assert not outcome.ok and "table entry 1" in (outcome.error_message or "")
        arenas.append(source._arena)
    # A new send (a new budget) reads its own session's params; the same
    # budget twice in a row reads them once.
    assert arenas == [(8, 64), (8, 64), None, (8, 64)]
    assert len(reads) == 3
