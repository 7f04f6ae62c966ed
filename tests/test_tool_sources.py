"""Tools from sources other than the guest: attached groups in the registry,
the approval policy in the loop, and Python functions as a real source."""

from __future__ import annotations

import json
from typing import Any

from spearpy.chat.loop import TOOL_DENIED, ToolLoop
from spearpy.chat.protocol import (
    CallBudget,
    CallTool,
    Complete,
    CompletionResult,
    Done,
    LoopLimits,
)
from spearpy.chat.registry import ToolRegistry, parse_tool_schema
from spearpy.chat.session import ChatSession
from spearpy.tools.python import PythonTools

tools = PythonTools()


@tools.tool(parameters={"type": "object", "properties": {"a": {"type": "integer"},
                                                         "b": {"type": "integer"}},
                        "required": ["a", "b"]})
def add(a: int, b: int) -> dict[str, int]:
    """Adds two integers."""
    return {"sum": a + b}


@tools.tool
def boom() -> str:
    raise RuntimeError("the function failed")


def completion(*calls: tuple[str, dict[str, Any], str], content: str = "") -> CompletionResult:
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        message["tool_calls"] = [{"id": cid, "type": "function",
                                  "function": {"name": name, "arguments": json.dumps(args)}}
                                 for name, args, cid in calls]
    return CompletionResult("b", "m", body={"choices": [{"index": 0, "message": message}]})


def session_with(approvals: dict[str, str] | None = None, guest: tuple[str, ...] = ()
                 ) -> ChatSession:
    session = ChatSession(1000)
    for name in guest:
        schema_name, spec = parse_tool_schema(json.dumps({"name": name}).encode())
        session.registry.add(schema_name, 7, spec)
    attached = [ToolRegistry.build(name, name, spec, tools,
                                   approval=(approvals or {}).get(name, "allow"))
                for name, spec in tools.specs()]
    clashes = session.registry.attach("python", attached, {"py.add": "add"})
    assert clashes == [name for name in guest if name in ("add", "boom")]
    session.write_message("user", "go")
    return session


def drive(loop: ToolLoop, replies: list[CompletionResult]) -> list[Any]:
    """Run the loop, performing each call through the tool's real source."""
    seen: list[Any] = []
    while True:
        action = loop.next_action()
        seen.append(action)
        if isinstance(action, Complete):
            loop.on_completion(replies.pop(0))
        elif isinstance(action, CallTool):
            source = action.tool.source
            assert source is not None
            loop.on_tool_result(action.call.id, source.call(
                action.tool.ref, action.arguments, CallBudget(65536)))
        else:
            seen.extend(loop.drain_notes())
            return seen


def test_attached_tools_are_offered_checked_and_called_through_their_source() -> None:
    session = session_with(guest=("echo",))
    loop = ToolLoop(session, LoopLimits(), auto=True, backend="b", model="m")
    seen = drive(loop, [completion(("add", {"a": 2, "b": 40}, "c1"),
                                   ("py.add", {"a": 1, "b": 1}, "c2"),
                                   ("add", {"a": "x"}, "c3"), ("boom", {}, "c4")),
                        completion(content="done")])
    first = seen[0]
    assert isinstance(first, Complete) and first.tools is not None
    assert [t["function"]["name"] for t in first.tools] == ["echo", "add", "boom"]
    answers = {m["tool_call_id"]: json.loads(m["content"]) for m in session.messages
               if m["role"] == "tool"}
    assert answers["c1"] == {"sum": 42} and answers["c2"] == {"sum": 2}  # alias routed
    assert answers["c3"]["error"]["code"] == "invalid_arguments"  # checked like a guest's
    assert answers["c4"]["error"] == {"code": "tool_exec_failed",
                                      "message": "RuntimeError: the function failed"}
    assert any(isinstance(a, Done) for a in seen)


def test_a_guest_tool_is_never_shadowed_by_an_attached_one() -> None:
    session = session_with(guest=("add",))
    tool = session.registry.get("add")
    assert tool is not None and tool.ref == 7 and tool.source is None


def test_denied_calls_are_answered_and_asked_calls_are_held_for_the_guest() -> None:
    session = session_with({"boom": "deny", "add": "ask"})
    loop = ToolLoop(session, LoopLimits(), auto=True, backend="b", model="m")
    seen = drive(loop, [completion(("boom", {}, "d1"), ("add", {"a": 1, "b": 2}, "a1"),
                                   ("add", {"a": 3, "b": 4}, "a2"))])
    done = next(a for a in seen if isinstance(a, Done))
    assert done.body["_spear"]["held"] == {"tool_call_id": "a1", "name": "add",
                                           "reason": "approval"}
    assert done.body["_spear"]["pending_tool_calls"] == ["a1", "a2"]
    assert not any(isinstance(a, CallTool) for a in seen)  # nothing ran
    denied = [json.loads(m["content"]) for m in session.messages if m["role"] == "tool"]
    assert [d["error"]["code"] for d in denied] == [TOOL_DENIED]
    assert [c.id for c in session.pending_calls()] == ["a1", "a2"]
    # An AUTO send with the held calls still pending is the guest's approval.
    again = ToolLoop(session, LoopLimits(), auto=True, backend="b", model="m")
    seen = drive(again, [completion(content="3 and 7")])
    ran = [a for a in seen if isinstance(a, CallTool)]
    assert [a.call.id for a in ran] == ["a1", "a2"]
    assert any(isinstance(a, Done) for a in seen)


def test_python_tools_refuse_reserved_and_duplicate_names() -> None:
    local = PythonTools()
    local.add(lambda: "x", name="ok")
    for bad in ("ok", "mcp__x", "has space", "x" * 65):
        try:
            local.add(lambda: "y", name=bad)
        except ValueError:
            continue
        raise AssertionError(f"{bad!r} was accepted")
