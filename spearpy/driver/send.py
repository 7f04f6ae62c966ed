"""Drives a ToolLoop for one cchat_send: a completion for each Complete, a tool
call for each CallTool (driver/calls.py composes both, with events, the
journal and cancellation around them). All policy lives in the loop; all I/O
lives here and below."""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any

from spearpy import _json, abi
from spearpy.chat.loop import ToolLoop
from spearpy.chat.params import resolve_limits
from spearpy.chat.protocol import (
    CallBudget,
    CallTool,
    CallTools,
    Complete,
    Failed,
    LimitHit,
    LoopNote,
    ToolOutcome,
    ToolSkipped,
)
from spearpy.driver.calls import SendCalls
from spearpy.errors import HostInterrupt
from spearpy.fds import ChatResponse, ChatSessionFd
from spearpy.observe import events as ev
from spearpy.observe import fields

if TYPE_CHECKING:
    from spearpy.chat.session import ChatSession
    from spearpy.context import RunContext


def _error_response(backend: str, model: str, code: str, message: str) -> ChatResponse:
    body = {"error": {"code": code, "message": message},
            "_spear": {"backend": backend, "model": model, "iterations": 0, "tool_calls": 0,
                       "usage": {"prompt_tokens": 0, "completion_tokens": 0,
                                 "total_tokens": 0}, "elapsed_ms": 0.0}}
    return ChatResponse(_json.compact_bytes(body), {}, True)


def _emit_notes(run: RunContext, fd: int, notes: list[LoopNote], iteration: int) -> None:
    for note in notes:
        if isinstance(note, LimitHit):
            run.events.emit(ev.LIMIT_HIT, fd, limit=note.limit, value=note.value,
                            iteration=iteration)
        elif isinstance(note, ToolSkipped):
            # A call answered without running the guest still gets its pair of
            # events, so tool_start/tool_end always match 1:1.
            call, cached = note.call, note.code == "cache_hit"
            run.events.emit(ev.TOOL_START, fd, content={"arguments": call.arguments},
                            **fields.tool_start(call.id, call.name, call.arguments,
                                                iteration=iteration, executed=False,
                                                cached=cached))
            run.events.emit(ev.TOOL_END, fd, **fields.tool_end(
                call.id, call.name, iteration=iteration, executed=False, cached=cached,
                error=None if cached else note.code,
                registered=_registered(run, fd, call.name)))


def _registered(run: RunContext, fd: int, name: str) -> bool:
    # Metrics use a call's name as a label only when it names a registered tool.
    entry = run.fds.get(fd, ChatSessionFd)
    return entry is not None and entry.session.registry.get(name) is not None


def run_send(run: RunContext, session: ChatSession, flags: int) -> ChatResponse:
    params = session.params
    auto = bool(flags & abi.SEND_AUTO_TOOL_CALL)
    backend, error = run.services.backend_for(params.get("backend"), params.get("model"),
                                              session)
    model = params.get("model") if isinstance(params.get("model"), str) else None
    model = model or (backend.default_model if backend is not None else "") or ""
    fd = session.fd
    if backend is not None and not model:
        model = _sole_model(backend)
    run.events.emit(ev.SEND_START, fd, auto=auto, model=model,
                    backend=backend.name if backend else None)
    if backend is None or not model:
        response = _error_response(
            backend.name if backend else str(params.get("backend")), model,
            "bad_backend" if backend is None else "no_model",
            error or "no model: set the session's `model` param, or start spearpy with "
                     "--model / SPEARPY_MODEL (the server does not list exactly one model "
                     "to default to)")
        run.events.emit(ev.SEND_END, fd, outcome="error", error="no_model")
        return response
    stops = run.interrupts
    run.services.tools.attach(
        session, run.options.task, deadline=stops.effective_deadline(),
        cancel=stops.cancel_event, on_failure=lambda server, why: run.events.emit(
            ev.SOURCE_UNAVAILABLE, fd, source="mcp", server=server, reason=why))
    limits = resolve_limits(params, run.services.limit_policy, run.config.max_parallel_tools)
    journal = run.journal
    loop = ToolLoop(session, limits, auto=auto, backend=backend.name, model=model,
                    metrics_enabled=bool(flags & abi.SEND_ENABLE_METRICS),
                    **({"clock": journal.clock} if journal is not None else {}))
    budget = CallBudget(limits.max_tool_output_bytes, stops.effective_deadline(),
                        stops.cancel_event, params)
    calls = SendCalls(run, fd, backend, model, params, budget,
                      lambda: loop.stats.iterations)
    kept = _SessionCharge(run, session)
    # One turn per step; feeding a result back to the loop returns the next
    # action. Before either kind of step, whatever ends the run (cancel,
    # deadline, a noted interrupt) ends the send.
    action = loop.next_action()
    while True:
        if loop.notes:
            _emit_notes(run, fd, loop.drain_notes(), loop.stats.iterations)
        kept.settle()
        if isinstance(action, CallTool):
            if (reason := stops.run_reason()) is not None:
                action = _interrupt(run, fd, loop, reason)
                break
            action = loop.on_tool_result(action.call.id, calls.call_tool(action), True)
        elif isinstance(action, Complete):
            if (reason := stops.run_reason()) is not None:
                action = _interrupt(run, fd, loop, reason)
                break
            result = calls.complete(action)
            if result is not None:  # None: cancelled mid-request; the next turn ends the send
                action = loop.on_completion(result, True)
        elif isinstance(action, CallTools):  # after the two of every iteration
            if (reason := stops.run_reason()) is not None:
                action = _interrupt(run, fd, loop, reason)
                break
            outcomes, reason = calls.call_tools(action, limits.max_parallel_tools)
            if reason is not None:
                done = {admitted.call.id: outcome
                        for admitted, outcome in zip(action.calls, outcomes, strict=True)
                        if outcome is not None}
                action = _interrupt(run, fd, loop, reason, done)
                break
            action = loop.on_tool_results([out for out in outcomes if out is not None], True)
        else:
            break  # Done or Failed
    stats = loop.stats
    run.add_usage(stats.usage.as_dict())
    is_error = isinstance(action, Failed)
    code = action.body.get("error", {}).get("code") if is_error else None
    run.events.emit(ev.SEND_END, fd, outcome="error" if is_error else "ok", error=code,
                    iterations=stats.iterations, tool_calls=stats.tool_calls,
                    usage=stats.usage.as_dict())
    body = _json.compact_bytes(action.body)
    with contextlib.suppress(HostInterrupt):  # noted; cchat_send ends the run
        kept.settle()  # what an interrupt's answers added
    if journal is not None:
        journal.sync()
    return ChatResponse(body, dict(session.last_metrics), is_error)


class _SessionCharge:
    """What a send's steps append to the session (replies, tool outputs)
    counts against the run's host-memory budget as it grows. Past it the
    run's interrupt is noted, which the next step's check obeys, so one send
    cannot pile up gigabytes."""

    __slots__ = ("_charged", "_max", "_run", "_session")

    def __init__(self, run: RunContext, session: ChatSession) -> None:
        self._run, self._session = run, session
        self._charged = session.appended_chars
        self._max = run.config.max_host_bytes

    def settle(self) -> None:
        appended = self._session.appended_chars
        if appended == self._charged:
            return
        # run.charge written out, called only to note the run going over:
        # this is every step of every send (two calls are ~4 % of a P5
        # iteration), and a try rather than contextlib.suppress (~8 %).
        run = self._run
        run.host_bytes += appended - self._charged
        self._charged = appended
        if run.host_bytes > self._max:
            try:  # noqa: SIM105
                run.charge(0, "replies and tool outputs")
            except HostInterrupt:
                pass  # noted on the run: the send ends at its next check


def _interrupt(run: RunContext, fd: int, loop: ToolLoop, reason: tuple[str, str],
               done: dict[str, ToolOutcome] | None = None) -> Failed:
    """End the send for what ends the run; its skipped calls get their events
    (`done`: the outcomes of the calls of a batch that ended before it)."""
    failed = loop.interrupt(reason[0], reason[1], done)
    _emit_notes(run, fd, loop.drain_notes(), loop.stats.iterations)
    return failed


def _sole_model(backend: Any) -> str:
    """The model of a server that serves only one, when nobody chose one."""
    ask = getattr(backend, "sole_model", None)
    model = ask() if callable(ask) else None
    if not isinstance(model, str) or not model:
        return ""
    from spearpy.observe.logger import get_logger

    get_logger("spearpy").info("no model chosen: using the server's only model",
                               backend=getattr(backend, "name", "?"), model=model)
    return model
