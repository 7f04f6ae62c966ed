"""How one send asks for a completion and calls a tool, composed once per send.

The loop's driver (send.py) calls `complete(action)` and `call_tool(action)`
and nothing else. What stands between them and the backend or the tool
source depends on the run, and is wrapped around the plain call here, each
layer only when the run needs it (a run nobody observes, journals or can
cancel pays for none):

    events        COMPLETION_START/END and TOKEN, TOOL_START/END
    journal       answered from the run's journal, or recorded into it
    cancel        the upstream request waited for on a worker, cut short
                  by a cancel from another thread (upstream.py)

`call_tools(batch, limit)` runs the calls of one reply at once
(parallel.py) from the same pieces: the source's call alone on workers, the
events and the journal around it on the guest's thread.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from spearpy import abi
from spearpy.backends.base import CompletionRequest
from spearpy.backends.router import route_record
from spearpy.chat.normalize import first_message
from spearpy.chat.protocol import CallBudget, CallTool, CallTools, Complete, ToolOutcome
from spearpy.driver import upstream
from spearpy.observe import events as ev
from spearpy.observe import fields

if TYPE_CHECKING:
    from spearpy.backends.base import Backend
    from spearpy.chat.protocol import CompletionResult
    from spearpy.context import RunContext
    from spearpy.driver.parallel import BatchCalls, Ended, Started
    from spearpy.interrupts import Reason

CompleteFn = Callable[[CompletionRequest, int], "CompletionResult | None"]
ToolFn = Callable[[CallTool], ToolOutcome]


class SendCalls:
    """The two calls of one send; None from `complete` means cancelled mid-request."""

    def __init__(self, run: RunContext, fd: int, backend: Backend, model: str,
                 params: dict[str, Any], budget: CallBudget,
                 iterations: Callable[[], int]) -> None:
        self._run = run
        self._model = model
        self._forwarded = _forwarded(params)
        timeout_ms = params.get("timeout_ms")
        self._timeout_s = timeout_ms / 1000.0 if isinstance(timeout_ms, int) and \
            timeout_ms > 0 else None
        self._stream = params.get("stream") is True
        self._last: CompletionRequest | None = None
        complete = _plain_complete(backend)
        if run.options.cancel is not None:
            complete = _cancellable(backend, run)
        call = plain = _plain_call(budget)
        if run.journal is not None:
            complete, call = _journaled_complete(run, complete), _journaled_call(run, call)
        unobserved = call
        self.observed = bool(run.events.sinks)
        events: tuple[Started, Ended] | None = None
        if self.observed:
            complete = _observed_complete(run, fd, backend, complete)
            events = _tool_events(run, fd, iterations)
            call = _observed_call(call, *events)
        self._complete = complete
        self._pieces = (plain, unobserved, events)
        self._max_output = budget.max_output_bytes
        self._batch: BatchCalls | None = None
        # A send with no layer calls the backend itself (two Python calls
        # fewer per completion: ~2 % of a P5 iteration).
        layered = run.options.cancel is not None or run.journal is not None or self.observed
        self._direct = None if layered else backend.complete
        self.call_tool: ToolFn = call

    def complete(self, action: Complete) -> CompletionResult | None:
        """The completion `action` asks for. The last request is asked again
        when nothing it carries changed: the transcript is one list that
        grows in place, and most sends ask with the same tools and deadline."""
        stops = self._run.interrupts
        deadline = stops.effective_deadline()
        request = self._last
        if request is None or request.messages is not action.messages or \
                request.tools is not action.tools or request.deadline != deadline:
            request = self._last = CompletionRequest(
                model=self._model, messages=action.messages, tools=action.tools,
                params=self._forwarded, timeout_s=self._timeout_s, deadline=deadline,
                cancel=stops.cancel_event, stream=self._stream)
        if self._direct is not None:
            return self._direct(request)
        return self._complete(request, action.iteration)

    def call_tools(self, batch: CallTools, limit: int,
                   ) -> tuple[list[ToolOutcome | None], Reason | None]:
        """The outcomes of a reply's calls run at once, at most `limit` of the
        non-guest ones at a time, and what ended the run if something did."""
        runner = self._batch
        if runner is None:
            from spearpy.driver.parallel import BatchCalls

            plain, guest, events = self._pieces
            started, ended = events if events is not None else (None, None)
            runner = self._batch = BatchCalls(self._run, serial=self.call_tool, plain=plain,
                                              guest=guest, started=started, ended=ended,
                                              max_output=self._max_output)
        return runner.run(batch, limit)


def _forwarded(params: dict[str, Any]) -> dict[str, Any]:
    from spearpy.chat.params import forwarded_params

    return forwarded_params(params)


# ---- the plain calls --------------------------------------------------------------


def _plain_complete(backend: Backend) -> CompleteFn:
    complete = backend.complete
    return lambda request, _iteration: complete(request)


def _cancellable(backend: Backend, run: RunContext) -> CompleteFn:
    waker = run.interrupts.waker
    return lambda request, _iteration: upstream.complete(backend, request, waker)


def _plain_call(budget: CallBudget) -> ToolFn:
    def call(action: CallTool) -> ToolOutcome:
        source = action.tool.source
        if source is None:
            return ToolOutcome(ok=False, error_code=abi.TOOL_EXEC_FAILED,
                               error_message=f"tool {action.call.name!r} has no source to "
                                             "run it")
        return source.call(action.tool.ref, action.arguments, budget)

    return call


# ---- the journal ------------------------------------------------------------------


def _journaled_complete(run: RunContext, inner: CompleteFn) -> CompleteFn:
    journal = run.journal
    assert journal is not None

    def complete(request: CompletionRequest, iteration: int) -> CompletionResult | None:
        return journal.completion(request, lambda: inner(request, iteration))

    return complete


def _journaled_call(run: RunContext, inner: ToolFn) -> ToolFn:
    """A guest tool runs again on replay and its output is checked; any
    other source's outcome is the journal's while it has one."""
    journal = run.journal
    assert journal is not None

    def call(action: CallTool) -> ToolOutcome:
        source = action.tool.source
        kind = source.kind if source is not None else "none"
        name = action.call.name
        if kind == "guest":
            outcome = inner(action)
            journal.guest_tool(name, action.arguments, outcome)
            return outcome
        return journal.tool(kind, name, action.arguments, lambda: inner(action))

    return call


# ---- events -------------------------------------------------------------------------


def _observed_complete(run: RunContext, fd: int, backend: Backend,
                       inner: CompleteFn) -> CompleteFn:
    events = run.events

    def complete(request: CompletionRequest, iteration: int) -> CompletionResult | None:
        events.emit(ev.COMPLETION_START, fd, iteration=iteration,
                    messages=len(request.messages))
        tokens = _TokenSink(run, fd, iteration) if request.stream else None
        if tokens is not None:
            from dataclasses import replace

            request = replace(request, on_delta=tokens)
        asked = time.monotonic()
        result = inner(request, iteration)
        if tokens is not None:
            tokens.close()
        if result is None:
            events.emit(ev.COMPLETION_END, fd, iteration=iteration,
                        latency_ms=round((time.monotonic() - asked) * 1000.0, 3),
                        usage=None, error="cancelled", status=None, tool_calls=0)
            return None
        usage = (result.body or {}).get("usage") if result.body else None
        events.emit(ev.COMPLETION_END, fd, iteration=iteration,
                    latency_ms=round(result.latency_ms, 3),
                    usage=usage if isinstance(usage, dict) else None,
                    error=result.error.code if result.error else None,
                    status=result.error.status if result.error else None,
                    tool_calls=_count_tool_calls(result.body),
                    ttft_ms=tokens.first_ms(asked) if tokens is not None else None,
                    **_routing(backend))
        return result

    return complete


def _tool_events(run: RunContext, fd: int,
                 iterations: Callable[[], int]) -> tuple[Started, Ended]:
    """TOOL_START and TOOL_END of a call that runs; `parallel`: how many
    calls of its batch may run at once (driver/overlap.py; 1, nothing
    overlapping, has no such field)."""
    events = run.events

    def started(action: CallTool, parallel: int) -> None:
        tool = action.tool
        extra = {"parallel": parallel} if parallel > 1 else {}
        events.emit(ev.TOOL_START, fd, content={"arguments": action.arguments},
                    **fields.tool_start(action.call.id, action.call.name, action.arguments,
                                        iteration=iterations(), executed=True,
                                        source=tool.source.kind if tool.source else None,
                                        server=tool.origin), **extra)

    def ended(action: CallTool, outcome: ToolOutcome, parallel: int) -> None:
        tool = action.tool
        extra = {"parallel": parallel} if parallel > 1 else {}
        events.emit(ev.TOOL_END, fd, content={"output": outcome.output},
                    **fields.tool_end(action.call.id, action.call.name, iteration=iterations(),
                                      executed=True, registered=True, rc=outcome.rc,
                                      duration_ms=outcome.duration_ms, output=outcome.output,
                                      error=outcome.error_code,
                                      source=tool.source.kind if tool.source else None,
                                      server=tool.origin), **extra)

    return started, ended


def _observed_call(inner: ToolFn, started: Started, ended: Ended) -> ToolFn:
    def call(action: CallTool) -> ToolOutcome:
        started(action, 1)
        outcome = inner(action)
        ended(action, outcome, 1)
        return outcome

    return call


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


def _routing(backend: object) -> dict[str, Any]:
    # How a routed completion was routed; nothing for a host that does not route.
    record = route_record(backend)
    return {"route": record} if record is not None else {}


def _count_tool_calls(body: dict[str, Any] | None) -> int:
    message = first_message(body)
    calls = message.get("tool_calls") if message is not None else None
    return len(calls) if isinstance(calls, list) else 0
