"""chat/toolio.py, the checks on a tool call's way in and out, agrees with
the rules the loop applied inline before (issue 19's split of loop.py), and
the loop's shortcut for a plain output is output_content's own answer."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from spearpy import abi
from spearpy.chat.protocol import ToolOutcome
from spearpy.chat.registry import ToolRegistry, parse_tool_schema
from spearpy.chat.session import tool_error_content
from spearpy.chat.toolio import check_arguments, output_content, unknown_tool

_ADD = {"name": "add", "parameters": {"type": "object", "properties": {
    "a": {"type": "integer"}, "b": {"type": "integer"}}, "required": ["a", "b"]}}
# No fast check for this one: jsonschema alone decides.
_PATTERN = {"name": "pat", "parameters": {"type": "object", "properties": {
    "s": {"type": "string", "pattern": "^x+$"}}}}


def _tool(raw: dict[str, Any]) -> Any:
    registry = ToolRegistry()
    name, spec = parse_tool_schema(json.dumps(raw).encode())
    return registry.add(name, 1, spec)


@pytest.mark.parametrize(("schema", "text", "validate", "problem"), [
    (_ADD, '{"a": 1, "b": 2}', True, None),
    (_ADD, '{"a": 1}', True, "'b' is a required property"),
    (_ADD, '{"a": "x", "b": 2}', True, "$.a: 'x' is not of type 'integer'"),
    (_ADD, "[1]", True, "arguments must be a JSON object"),
    (_ADD, "[1]", False, None),
    (_ADD, '{"a": NaN, "b": 1}', True, "arguments are not valid JSON: NaN is not valid JSON"),
    (_ADD, "{", False, "arguments are not valid JSON: Expecting property name enclosed in "
                       "double quotes: line 1 column 2 (char 1)"),
    (_PATTERN, '{"s": "xx"}', True, None),
    (_PATTERN, '{"s": "y"}', True, "$.s: 'y' does not match '^x+$'"),
])
def test_check_arguments(schema: dict[str, Any], text: str, validate: bool,
                         problem: str | None) -> None:
    parsed, got = check_arguments(_tool(schema), text, validate)
    assert got == problem
    if problem is None:
        assert parsed == json.loads(text)


def _reference(outcome: ToolOutcome, max_bytes: int) -> tuple[str, bool]:
    """The loop's _tool_content before the split, less the cache."""
    if not outcome.ok:
        return tool_error_content(outcome.error_code or abi.TOOL_EXEC_FAILED,
                                  outcome.error_message or ""), False
    try:
        size = len(outcome.output.encode("utf-8"))
    except UnicodeEncodeError:
        return tool_error_content(abi.TOOL_EXEC_FAILED, "tool output is not valid UTF-8"), False
    if size > max_bytes:
        return tool_error_content(
            abi.TOOL_OUTPUT_TOO_LARGE,
            f"tool output is {size} bytes, over max_tool_output_bytes ({max_bytes})"), False
    return outcome.output, True


@given(st.booleans(), st.one_of(st.text(max_size=40), st.just("a\ud800")), st.integers(0, 60),
       st.one_of(st.none(), st.just("tool_exec_failed")))
def test_output_content_and_the_loops_shortcut(ok: bool, output: str, max_bytes: int,
                                                code: str | None) -> None:
    outcome = ToolOutcome(ok=ok, output=output, error_code=code, error_message="why")
    got = output_content(outcome, max_bytes)
    assert got == _reference(outcome, max_bytes)
    # on_tool_result appends the output as it is when this holds.
    if ok and output.isascii() and len(output) <= max_bytes:
        assert got == (output, True)


def test_unknown_tool_names_are_shortened() -> None:
    assert unknown_tool("x" * 500) == f"no tool named {'x' * 80!r} is registered"
