"""Python functions as tools: a tool source an embedder fills on the Host.

    tools = PythonTools()

    @tools.tool(parameters={"type": "object", "properties": {"city": {"type": "string"}}})
    def weather(city: str) -> dict:
        return {"city": city, "sky": "clear"}

    Host(python_tools=tools)   # every session of every run is offered `weather`

A call gets the model's arguments as keyword arguments (already checked
against the schema by the loop, like a guest tool's); a str result is the
tool output as is, anything else is serialised as JSON. An exception is a
`tool_exec_failed` answer for the model, never a crash of the send. With
`max_parallel_tools` above 1 (the default) the calls of one reply run at
once on worker threads (driver/parallel.py), so a function must be safe to
call concurrently; it cannot be interrupted (the send's deadline is checked
before it starts), and on a cancel or the deadline a call still running is
abandoned, its result dropped; while 256 abandoned calls still run, a batch
answers its calls tool_exec_failed rather than start them (parallel.py
MAX_STRAYS: a function that never returns holds its thread for good).
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

from spearpy import _json, abi
from spearpy.chat.protocol import CallBudget, JSONDict, ToolOutcome

_NAME = re.compile(r"[a-zA-Z0-9_-]{1,64}")
F = TypeVar("F", bound=Callable[..., Any])


class PythonTools:
    """A set of Python functions offered to the model (chat.protocol.ToolSource)."""

    kind = "python"

    def __init__(self) -> None:
        self._tools: dict[str, tuple[Callable[..., Any], JSONDict]] = {}
        self._lock = threading.Lock()

    def add(self, fn: Callable[..., Any], *, name: str | None = None,
            description: str | None = None, parameters: JSONDict | None = None) -> None:
        tool_name = name or fn.__name__
        if not _NAME.fullmatch(tool_name) or tool_name.startswith("mcp__"):
            raise ValueError(f"tool name {tool_name!r} must match ^[a-zA-Z0-9_-]{{1,64}}$ "
                             "and not start with mcp__ (reserved for MCP tools)")
        function: JSONDict = {"name": tool_name}
        text = description if description is not None else (fn.__doc__ or "").strip()
        if text:
            function["description"] = text
        function["parameters"] = parameters or {"type": "object", "properties": {}}
        with self._lock:
            if tool_name in self._tools:
                raise ValueError(f"tool {tool_name!r} is already registered")
            self._tools[tool_name] = (fn, {"type": "function", "function": function})

    def tool(self, fn: F | None = None, *, name: str | None = None,
             description: str | None = None,
             parameters: JSONDict | None = None) -> Any:
        """Decorator form of `add`, with or without arguments."""
        def register(func: F) -> F:
            self.add(func, name=name, description=description, parameters=parameters)
            return func

        return register(fn) if fn is not None else register

    def specs(self) -> list[tuple[str, JSONDict]]:
        with self._lock:
            return [(name, spec) for name, (_, spec) in self._tools.items()]

    def call(self, ref: Any, arguments: str, budget: CallBudget) -> ToolOutcome:
        started = time.monotonic()
        entry = self._tools.get(str(ref))
        if entry is None:
            return _failed(f"no Python tool named {ref!r}", started)
        if budget.deadline is not None and started >= budget.deadline:
            return _failed("the send's deadline passed before the tool started", started)
        try:
            args = _json.loads(arguments) if arguments.strip() else {}
            if not isinstance(args, dict):
                return _failed("arguments must be a JSON object", started)
            result = entry[0](**args)
            output = result if isinstance(result, str) else json.dumps(
                result, separators=(",", ":"), ensure_ascii=False, default=str)
        except Exception as exc:  # the model reads what went wrong, the send goes on
            return _failed(f"{type(exc).__name__}: {exc}"[:500], started)
        return ToolOutcome(ok=True, output=output,
                           duration_ms=(time.monotonic() - started) * 1000.0)


def _failed(message: str, started: float) -> ToolOutcome:
    return ToolOutcome(ok=False, error_code=abi.TOOL_EXEC_FAILED, error_message=message,
                       duration_ms=(time.monotonic() - started) * 1000.0)
