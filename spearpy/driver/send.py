"""Drives a ToolLoop for one cchat_send: backends for Complete, guest calls for
CallTool, events around both. All policy lives in the loop; all I/O lives here."""

from __future__ import annotations

import contextlib
import threading
import time
from typing import TYPE_CHECKING, Any

from spearpy import _json, abi
from spearpy.backends.base import CompletionRequest
from spearpy.backends.router import route_record
from spearpy.chat.loop import ToolLoop
from spearpy.chat.params import forwarded_params, resolve_limits
from spearpy.chat.protocol import (
    CallBudget,
    CallTool,
    Complete,
    Done,
    Failed,
    LimitHit,
    LoopNote,
    ToolOutcome,
    ToolSkipped,
)
from spearpy.driver import upstream
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
    backend, error = run.services.backend_for(params.get("backend"), params.get("model"), session)
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
    limits = resolve_limits(params, run.services.limit_policy)
    loop = ToolLoop(session, limits, auto=auto, backend=backend.name, model=model,
                    metrics_enabled=bool(flags & abi.SEND_ENABLE_METRICS))
    timeout_ms = params.get("timeout_ms")
    timeout_s = timeout_ms / 1000.0 if isinstance(timeout_ms, int) and timeout_ms > 0 else None
    forwarded = forwarded_params(params)
    stream = params.get("stream") is True
    budget = CallBudget(limits.max_tool_output_bytes, stops.effective_deadline(),
                        stops.cancel_event, params)
    events = run.events
    # A run nobody can cancel calls the backend directly (upstream.complete's
    # own first test, made here once: a Python call saved per completion).
    waker = stops.waker if run.options.cancel is not None else None
    charged = session.appended_chars
    max_host_bytes = run.config.max_host_bytes
    request: CompletionRequest | None = None
    # One turn per step; feeding a result back to the loop returns the next
    # action. The hot path reads plain attributes (the event sinks, the
    # loop's notes, the session's appended size) rather than calling
    # properties or helpers: each costs a Python call per step.
    action = loop.next_action()
    while True:
        if loop.notes:
            _emit_notes(run, fd, loop.drain_notes(), loop.stats.iterations)
        appended = session.appended_chars
        if appended != charged:
            # What the last step appended (a reply, tool outputs) counts
            # against the run's host-memory budget. Past it the run's
            # interrupt is set, which the check below obeys, so one send
            # cannot pile up gigabytes. (run.charge, written out: it is
            # called only to note the run going over.)
            run.host_bytes += appended - charged
            charged = appended
            if run.host_bytes > max_host_bytes:
                try:  # noqa: SIM105 (contextlib.suppress costs a context manager per step)
                    run.charge(0, "replies and tool outputs")
                except HostInterrupt:
                    pass  # noted on the run
        # The four actions are final classes: one identity test tells each
        # step what it is. Before either step, whatever ends the run
        # (cancel, deadline, a noted interrupt) ends the send.
        if type(action) is CallTool:
            reason = stops.run_reason()
            if reason is not None:
                action = _interrupt(run, fd, loop, reason)
                break
            if events.sinks:  # building event fields costs ~10 us a call
                outcome = _observed_call(run, fd, action, budget, loop.stats.iterations)
            else:
                tool = action.tool
                source = tool.source
                outcome = (source.call(tool.ref, action.arguments, budget)
                           if source is not None else _no_source(action.call.name))
            action = loop.on_tool_result(action.call.id, outcome, True)
            continue
        if type(action) is not Complete:
            break  # Done or Failed
        reason = stops.run_reason()
        if reason is not None:
            action = _interrupt(run, fd, loop, reason)
            break
        observed = bool(events.sinks)
        if observed:
            events.emit(ev.COMPLETION_START, fd, iteration=action.iteration,
                        messages=len(action.messages))
        tokens = _TokenSink(run, fd, action.iteration) if stream and observed else None
        # stops.effective_deadline(), written out for the usual case: no
        # tool deadline is in force unless this send runs inside a tool.
        deadline = stops.deadline if stops.tool_deadline is None else \
            stops.effective_deadline()
        # The last request (frozen) is asked again when every field it would
        # get is the same object: the transcript is one list that grows in
        # place. A new one costs ~2 us an iteration.
        if request is None or tokens is not None or request.on_delta is not None or \
                request.messages is not action.messages or \
                request.tools is not action.tools or request.deadline != deadline:
            request = CompletionRequest(
                model=model, messages=action.messages, tools=action.tools,
                params=forwarded, timeout_s=timeout_s, deadline=deadline,
                cancel=stops.cancel_event, stream=stream, on_delta=tokens)
        # Only events and a cancelled request's report read the time asked.
        asked = time.monotonic() if observed or waker is not None else 0.0
        result = backend.complete(request) if waker is None else \
            upstream.complete(backend, request, waker)
        if tokens is not None:
            tokens.close()
        if result is None:
            # Cancelled mid-request: the next turn of the loop interrupts the send.
            events.emit(ev.COMPLETION_END, fd, iteration=action.iteration,
                        latency_ms=round((time.monotonic() - asked) * 1000.0, 3),
                        usage=None, error="cancelled", status=None,
                        tool_calls=0)
            continue
        if observed:
            usage = (result.body or {}).get("usage") if result.body else None
            events.emit(ev.COMPLETION_END, fd, iteration=action.iteration,
                        latency_ms=round(result.latency_ms, 3),
                        usage=usage if isinstance(usage, dict) else None,
                        error=result.error.code if result.error else None,
                        status=result.error.status if result.error else None,
                        tool_calls=_count_tool_calls(result.body),
                        ttft_ms=tokens.first_ms(asked) if tokens is not None else None,
                        **_routing(backend))
        action = loop.on_completion(result, True)
    assert isinstance(action, (Done, Failed))
    stats = loop.stats
    run.add_usage(stats.usage.as_dict())
    is_error = isinstance(action, Failed)
    code = action.body.get("error", {}).get("code") if is_error else None
    run.events.emit(ev.SEND_END, fd, outcome="error" if is_error else "ok", error=code,
                    iterations=stats.iterations, tool_calls=stats.tool_calls,
                    usage=stats.usage.as_dict())
    body = _json.compact_bytes(action.body)
    if session.appended_chars != charged:  # what an interrupt's answers added
        with contextlib.suppress(HostInterrupt):  # noted; cchat_send ends the run
            run.charge(session.appended_chars - charged, "replies and tool outputs")
    return ChatResponse(body, dict(session.last_metrics), is_error)


def _observed_call(run: RunContext, fd: int, action: CallTool, budget: CallBudget,
                   iteration: int) -> ToolOutcome:
    """The tool call of a send somebody listens to, between its tool_start and
    tool_end events (run_send calls the source itself when nobody listens)."""
    call, tool = action.call, action.tool
    source = tool.source
    kind = source.kind if source is not None else None
    events = run.events
    events.emit(ev.TOOL_START, fd, content={"arguments": action.arguments},
                **fields.tool_start(call.id, call.name, action.arguments, iteration=iteration,
                                    executed=True, source=kind, server=tool.origin))
    outcome = (source.call(tool.ref, action.arguments, budget)
               if source is not None else _no_source(call.name))
    events.emit(ev.TOOL_END, fd, content={"output": outcome.output},
                **fields.tool_end(call.id, call.name, iteration=iteration, executed=True,
                                  registered=True, rc=outcome.rc,
                                  duration_ms=outcome.duration_ms, output=outcome.output,
                                  error=outcome.error_code, source=kind, server=tool.origin))
    return outcome


def _interrupt(run: RunContext, fd: int, loop: ToolLoop, reason: tuple[str, str]) -> Failed:
    """End the send for what ends the run; its skipped calls get their events."""
    failed = loop.interrupt(reason[0], reason[1])
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


class _TokenSink:
    """TOKEN events for one streamed completion's text deltas.

    A cancellable run waits for the request on another thread and abandons it
    on cancel; the abandoned request may still deliver deltas. Once the
    completion is over for the run (close), they are dropped, so no token
    event follows its completion_end."""

    __slots__ = ("_fd", "_first", "_iteration", "_lock", "_open", "_run")

    def __init__(self, run: RunContext, fd: int, iteration: int) -> None:
        self._run, self._fd, self._iteration = run, fd, iteration
        self._lock = threading.Lock()
        self._open = True
        self._first: float | None = None

    def first_ms(self, asked: float) -> float | None:
        """Time to the first token, from when the completion was asked for."""
        return None if self._first is None else round((self._first - asked) * 1000.0, 3)

    def __call__(self, text: str) -> None:
        with self._lock:
            if self._first is None:
                self._first = time.monotonic()
            if self._open:
                self._run.events.emit(ev.TOKEN, self._fd, iteration=self._iteration,
                                      bytes=len(text.encode()), content={"text": text})

    def close(self) -> None:
        with self._lock:
            self._open = False


def _no_source(name: str) -> ToolOutcome:
    return ToolOutcome(ok=False, error_code=abi.TOOL_EXEC_FAILED,
                       error_message=f"tool {name!r} has no source to run it")


def _routing(backend: object) -> dict[str, Any]:
    # How a routed completion was routed; nothing for a host that does not route.
    record = route_record(backend)
    return {"route": record} if record is not None else {}


def _count_tool_calls(body: dict[str, Any] | None) -> int:
    try:
        calls = body["choices"][0]["message"].get("tool_calls") if body else None
    except (KeyError, IndexError, TypeError, AttributeError):
        return 0
    return len(calls) if isinstance(calls, list) else 0
