"""The guest side of `spearpy mcp serve`: a guest held inside its first send.

A wasm store is single-threaded, so every call into the guest must run on the
thread that runs the guest. `GuestBridge.hook` is the run's send hook: at the
guest's first `cchat_send` it takes the tools registered on that session and
then stays inside the send, running the calls other threads put on its queue
one at a time. Each call goes through the guest's own tool source with the
same budget, argument checks and output limit as a call from the auto tool
loop, so its answer is the tool message the loop would have produced.

Stopping cancels the run (a call in progress included); that, or the run's
own cancel or deadline, ends the send with HostInterrupt and the run as
`cancelled`; calls still queued fail with `BridgeClosed`.
"""

from __future__ import annotations

import concurrent.futures
import json
import queue
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NoReturn

from spearpy import _json, abi
from spearpy.chat.params import resolve_limits
from spearpy.chat.protocol import CallBudget, ToolOutcome
from spearpy.chat.session import tool_error_content
from spearpy.errors import HostInterrupt, SpearpyError

if TYPE_CHECKING:
    from spearpy.chat.registry import Tool
    from spearpy.chat.session import ChatSession
    from spearpy.context import RunContext

# How often the held send looks at the run's cancel and deadline while no
# call is queued; a call is picked up the moment it is queued.
POLL_S = 0.1
STOPPED_MESSAGE = "the MCP server shut down"


class BridgeClosed(SpearpyError):
    """The guest can take no more calls: the server stopped or the run ended."""


@dataclass(frozen=True, slots=True)
class GuestTool:
    """One tool the guest registered, as an MCP server lists it."""

    name: str
    description: str | None
    input_schema: dict[str, Any]


@dataclass(frozen=True, slots=True)
class ToolAnswer:
    """What one call produced: the tool message the loop would have sent."""

    content: str
    is_error: bool
    error_code: str | None
    duration_ms: float


@dataclass(slots=True)
class _Call:
    name: str
    arguments: dict[str, Any]
    future: concurrent.futures.Future[ToolAnswer]


_STOP = object()


def input_schema(spec: dict[str, Any]) -> dict[str, Any]:
    """The guest's parameters schema as an MCP inputSchema, which must be an
    object schema: a tool registered without one takes an empty object."""
    parameters = spec.get("function", {}).get("parameters")
    schema = dict(parameters) if isinstance(parameters, dict) else {}
    schema.setdefault("type", "object")
    if schema["type"] == "object":
        schema.setdefault("properties", {})
    return schema


class GuestBridge:
    """Thread-safe: `submit` from any thread; `hook` runs on the guest's."""

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue[_Call | object] = queue.SimpleQueue()
        self._ready = threading.Event()
        self._stopped = threading.Event()
        self._tools: dict[str, Tool] = {}
        self._run: RunContext | None = None  # set on the guest's thread at its first send
        self.tools: list[GuestTool] = []
        self.session_fd: int | None = None
        self._closed_why: str | None = None
        # Closing and queueing exclude each other: a call queued just after
        # the last drain would wait forever.
        self._lock = threading.Lock()

    # ---- the server's side (any thread) --------------------------------------

    def wait_ready(self, timeout: float | None) -> bool:
        """True once the guest reached its first send and its tools are known."""
        return self._ready.wait(timeout)

    @property
    def ready(self) -> bool:
        return self._ready.is_set()

    def submit(self, name: str, arguments: dict[str, Any]) -> concurrent.futures.Future[ToolAnswer]:
        """Queue a call; the future gets its ToolAnswer, or BridgeClosed. A
        future cancelled while still queued is skipped, never run."""
        future: concurrent.futures.Future[ToolAnswer] = concurrent.futures.Future()
        with self._lock:
            if self._closed_why is None:
                self._queue.put(_Call(name, arguments, future))
                return future
            why = self._closed_why
        future.set_exception(BridgeClosed(why))
        return future

    def stop(self, why: str = STOPPED_MESSAGE) -> None:
        """End the held send now, a call in progress included (the run then
        ends as cancelled, with `why`). Idempotent; safe from any thread."""
        with self._lock:
            self._closed_why = self._closed_why or why
            self._stopped.set()
            self._queue.put(_STOP)
            run = self._run
        if run is not None:
            # Wakes a tool waiting in sleep_ms or epoll too, not only the queue.
            run.interrupts.cancel("cancelled", self._closed_why)

    def run_ended(self, why: str) -> None:
        """The run is over (the guest exited, trapped, or was stopped): every
        call queued or still to come fails with `why`."""
        self._close(why)

    # ---- the guest's side (its own thread) -----------------------------------

    def hook(self, run: RunContext, session: ChatSession, flags: int) -> None:
        """The run's send hook (RunOptions.send_hook). The first send never
        returns: it serves until the run ends. A later send can only come
        from a tool running inside it (an agent calling a sub-agent): that
        one goes upstream as it would in the loop (None)."""
        del flags
        if self._ready.is_set():
            return None
        with self._lock:
            if self._stopped.is_set():
                raise HostInterrupt("cancelled", self._closed_why or STOPPED_MESSAGE)
            self._run = run
        self._capture(session)
        self._ready.set()
        try:
            self._serve(run, session)
        finally:
            self._close("the guest stopped serving")

    def _capture(self, session: ChatSession) -> None:
        registry = session.registry
        self.session_fd = session.fd
        for spec in registry.specs() or ():
            name = spec["function"]["name"]
            tool = registry.get(name)
            if tool is None or name not in registry:
                continue  # a host tool attached by an earlier send: not the guest's
            self._tools[name] = tool
            self.tools.append(GuestTool(name, spec["function"].get("description"),
                                        input_schema(spec)))

    def _serve(self, run: RunContext, session: ChatSession) -> NoReturn:
        while True:
            try:
                item = self._queue.get(timeout=POLL_S)
            except queue.Empty:
                item = None
            reason: tuple[str, str] | None = run.interrupts.run_reason()
            if reason is None and (item is _STOP or self._stopped.is_set()):
                reason = ("cancelled", self._closed_why or STOPPED_MESSAGE)
            if reason is not None:
                self._close(reason[1])
                if isinstance(item, _Call) and item.future.set_running_or_notify_cancel():
                    # Taken off the queue just as the run ended: fail it, or its
                    # caller would wait forever.
                    item.future.set_exception(BridgeClosed(self._closed_why or reason[1]))
                raise HostInterrupt(*reason)
            if not isinstance(item, _Call):
                continue
            if not item.future.set_running_or_notify_cancel():
                continue  # the client gave up while it waited in the queue
            try:
                answer = self._call(run, session, item)
            except BaseException as exc:
                item.future.set_exception(exc)
                raise
            item.future.set_result(answer)

    def _call(self, run: RunContext, session: ChatSession, call: _Call) -> ToolAnswer:
        """One call, checked and limited as the auto tool loop checks it."""
        tool = self._tools.get(call.name)
        if tool is None or tool.source is None:
            return _error(abi.TOOL_UNKNOWN, f"no tool named {call.name!r}")
        limits = resolve_limits(session.params, run.services.limit_policy)
        arguments = json.dumps(call.arguments, separators=(",", ":"), ensure_ascii=False)
        if limits.validate_tool_args:
            # A round trip through the loop's own parser: what the guest gets
            # is exactly what the checks saw.
            parsed = _json.loads(arguments)
            if tool.check is None or not tool.check(parsed):
                problem = tool.validate(parsed)
                if problem is not None:
                    return _error(abi.TOOL_INVALID_ARGUMENTS, problem)
        budget = CallBudget(limits.max_tool_output_bytes, run.interrupts.effective_deadline(),
                            run.interrupts.cancel_event, session.params)
        outcome: ToolOutcome = tool.source.call(tool.ref, arguments, budget)
        if not outcome.ok:
            return _error(outcome.error_code or abi.TOOL_EXEC_FAILED,
                          outcome.error_message or "", outcome.duration_ms)
        try:
            size = len(outcome.output.encode("utf-8"))
        except UnicodeEncodeError:
            return _error(abi.TOOL_EXEC_FAILED, "tool output is not valid UTF-8",
                          outcome.duration_ms)
        if size > limits.max_tool_output_bytes:
            return _error(abi.TOOL_OUTPUT_TOO_LARGE,
                          f"tool output is {size} bytes, over max_tool_output_bytes "
                          f"({limits.max_tool_output_bytes})", outcome.duration_ms)
        return ToolAnswer(outcome.output, False, None, outcome.duration_ms)

    def _close(self, why: str) -> None:
        with self._lock:
            self._closed_why = self._closed_why or why
        self._drain(self._closed_why)

    def _drain(self, why: str) -> None:
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                return
            if isinstance(item, _Call) and item.future.set_running_or_notify_cancel():
                item.future.set_exception(BridgeClosed(why))


def _error(code: str, message: str, duration_ms: float = 0.0) -> ToolAnswer:
    return ToolAnswer(tool_error_content(code, message), True, code, duration_ms)
