"""ToolLoop: the sans-IO state machine of one cchat_send.

The driver asks `next_action()` what to do, performs it (HTTP, a guest call)
and feeds the result back with `on_completion` / `on_tool_result`. The loop
never does I/O itself, so every policy here is testable with plain data.

Like h11, the legal state changes live in one explicit table (states.py), and anything
that ends the send moves the machine into a terminal state in one step: the
session is left with every tool call of its last assistant message answered
(auto sends), the final Done/Failed action is fixed, and metrics are written
(the endings: chat/endings.py).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from typing import Final, Literal, overload

from spearpy import abi
from spearpy.chat.batch import Cached, CacheKey, Skip, Stop, admission, admit_batch
from spearpy.chat.bodies import (
    CACHE_HIT,
    INTERNAL_ERROR,
    LOOP_ERROR_CODES,
    TOOL_DENIED,
    UPSTREAM_BAD_RESPONSE,
    error_body,
)
from spearpy.chat.endings import SendEndings
from spearpy.chat.normalize import bad_response_reason, first_message
from spearpy.chat.protocol import (
    Action,
    CallTool,
    CallTools,
    Complete,
    CompletionResult,
    Done,
    Failed,
    LimitHit,
    LoopLimits,
    LoopNote,
    SendStats,
    ToolCall,
    ToolOutcome,
    ToolSkipped,
)
from spearpy.chat.session import ChatSession, tool_error_content
from spearpy.chat.states import (
    LoopEvent,
    LoopProtocolError,
    LoopState,
    next_state,
)
from spearpy.chat.toolio import output_content

# Read a few times an iteration: a member looked up on its Enum class goes
# through EnumType (~1k instructions in 3.11), 0.8-3 % of P5 (docs/benchmarks.md).
_ACTING: Final = LoopState.ACTING
_CALLS_RECEIVED: Final = LoopEvent.CALLS_RECEIVED
_CALLS_ANSWERED: Final = LoopEvent.CALLS_ANSWERED


class ToolLoop(SendEndings):
    def __init__(self, session: ChatSession, limits: LoopLimits, *, auto: bool, backend: str,
                 model: str, metrics_enabled: bool = False,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.session = session
        self.limits = limits
        self.auto = auto
        self.backend = backend
        self.model = model
        self.stats = SendStats()
        self.state = LoopState.THINKING
        self._metrics_enabled = metrics_enabled
        self._clock = clock
        self._started = clock()
        # Notes for observers, oldest first: drain_notes() takes them (a driver
        # may test the list itself; it is empty on almost every step).
        self.notes = []
        self._queue = deque()  # head = the call being answered
        self._awaiting = None
        self._final = None
        self._cache: dict[CacheKey, str] = {}
        self._in_flight_key: CacheKey | None = None
        self._batch_keys = []  # a CallTools' calls'
        # The reply whose calls are being answered (its body ends a held send),
        # and the calls the guest approved by sending AUTO with them pending.
        self._reply = None
        self._approved: frozenset[str] = frozenset()
        # A send's tools are fixed while it runs (the hostcalls that change a
        # session refuse one that is sending): looked up and offered from
        # these, taken once, not asked of the registry on every step.
        registry = session.registry
        self._tools = registry.by_name()
        # The longest output on_tool_result passes without output_content
        # (none when results are cached: the cache needs the key).
        self._plain_max = limits.max_tool_output_bytes if not limits.cache_tool_results else -1
        self._parallel = limits.max_parallel_tools > 1  # read once a call
        self._specs = registry.specs()
        self._start()

    # ---- public surface --------------------------------------------------

    @property
    def final(self) -> Done | Failed | None:
        return self._final

    def next_action(self) -> Action:
        """What the driver must do now; repeated calls return the same action."""
        if self._final is not None:
            return self._final
        if self._awaiting is not None:
            return self._awaiting
        if self.state is _ACTING:
            action = self._advance_calls()
            if action is not None:
                return action
            if self._final is not None:
                return self._final
        return self._next_completion()

    # A driver that asks next_action() right after feeding a result passes
    # advance=True and gets that action back.

    @overload
    def on_completion(self, result: CompletionResult,
                      advance: Literal[False] = False) -> None: ...

    @overload
    def on_completion(self, result: CompletionResult, advance: Literal[True]) -> Action: ...

    def on_completion(self, result: CompletionResult, advance: bool = False) -> Action | None:
        """Feed the outstanding Complete's result; with `advance`, return next_action()."""
        if not isinstance(self._awaiting, Complete):
            self._misuse("on_completion() without an outstanding Complete action")
        self._awaiting = None
        if result.backend:
            self.backend = result.backend
        if result.model:
            self.model = result.model
        body = result.body
        if isinstance(body, dict):
            self.stats.usage.add(body.get("usage"))
        if result.error is not None:
            err = result.error
            self._fail(err.code, err.message, status=err.status, details=err.details)
            return self._final if advance else None
        message = first_message(body)
        if message is None:
            self._fail(UPSTREAM_BAD_RESPONSE, bad_response_reason(body))
            return self._final if advance else None
        assert body is not None  # a message came from it
        normalized, calls = self.session.append_reply(message)
        if not self.auto or not calls:
            self._finish(body)
            return self._final if advance else None
        self._reply = (body, normalized)
        self._accept_calls(calls)
        return self.next_action() if advance else None

    @overload
    def on_tool_result(self, call_id: str, outcome: ToolOutcome,
                       advance: Literal[False] = False) -> None: ...

    @overload
    def on_tool_result(self, call_id: str, outcome: ToolOutcome,
                       advance: Literal[True]) -> Action: ...

    def on_tool_result(self, call_id: str, outcome: ToolOutcome,
                       advance: bool = False) -> Action | None:
        """Feed the outstanding CallTool's outcome; with `advance`, return next_action()."""
        action = self._awaiting
        if not isinstance(action, CallTool) or action.call.id != call_id:
            self._misuse(f"on_tool_result({call_id!r}) does not answer the outstanding action")
        self._awaiting = None
        call = self._queue.popleft()
        output = outcome.output
        # output_content's first case, without its two calls (1.4 % of P5).
        if outcome.ok and output.isascii() and len(output) <= self._plain_max:
            self._in_flight_key = None
            self.session.answer(call.id, output)
        else:
            self.session.answer(call.id, self._tool_content(outcome))
        return self.next_action() if advance else None

    @overload
    def on_tool_results(self, outcomes: list[ToolOutcome],
                        advance: Literal[False] = False) -> None: ...

    @overload
    def on_tool_results(self, outcomes: list[ToolOutcome], advance: Literal[True]) -> Action: ...

    def on_tool_results(self, outcomes: list[ToolOutcome],
                        advance: bool = False) -> Action | None:
        """Feed the outstanding CallTools' outcomes, in its calls' order; with
        `advance`, return next_action()."""
        action = self._awaiting
        if not isinstance(action, CallTools) or len(outcomes) != len(action.calls):
            self._misuse("on_tool_results() does not answer the outstanding CallTools")
        self._awaiting = None
        for outcome, key in zip(outcomes, self._batch_keys, strict=True):
            call = self._queue.popleft()
            self._in_flight_key = key
            self.session.answer(call.id, self._tool_content(outcome))
        self._batch_keys = []
        return self.next_action() if advance else None

    def interrupt(self, code: str, message: str,
                  done: dict[str, ToolOutcome] | None = None) -> Failed:
        """End the send now (deadline, cancel); every pending call gets this
        error, but the calls of an outstanding CallTools that ended (`done`,
        by call id), which get their outcomes."""
        if self._final is not None:
            raise LoopProtocolError("interrupt() after the send ended")
        action, self._awaiting = self._awaiting, None
        if isinstance(action, CallTools) and done:
            for admitted, key in zip(action.calls, self._batch_keys, strict=True):
                outcome = done.get(admitted.call.id)
                if outcome is not None:
                    self._in_flight_key = key
                    self.session.answer(admitted.call.id, self._tool_content(outcome))
                else:
                    self.session.answer(admitted.call.id, tool_error_content(code, message))
                    self.notes.append(ToolSkipped(call=admitted.call, code=code,
                                                  message=message))
        self._batch_keys = []
        self._queue.clear()
        for call in self.session.answer_pending(code, message):
            self.notes.append(ToolSkipped(call=call, code=code, message=message))
        failed = Failed(error_body(code, message, self._summary()))
        self._end(failed, LoopEvent.INTERRUPT)
        return failed

    def drain_notes(self) -> list[LoopNote]:
        notes, self.notes = self.notes, []
        return notes

    # ---- steps -----------------------------------------------------------

    def _start(self) -> None:
        pending = self.session.pending_calls()
        if pending and not self.auto:
            self._fail(
                abi.SEND_PENDING_TOOL_CALLS,
                f"{len(pending)} tool call(s) of the last assistant message are unanswered: "
                "answer them with a tool message or send with AUTO_TOOL_CALL",
            )
        elif pending or (self.auto and self.limits.max_iterations <= 0):
            self._approved = frozenset(call.id for call in pending)
            self._accept_calls(pending)

    def _accept_calls(self, calls: list[ToolCall]) -> None:
        """Run a reply's calls, unless the send could not go on after them."""
        limits = self.limits
        if self.stats.iterations >= limits.max_iterations:
            self._stop_at_limit(
                LimitHit("max_iterations", limits.max_iterations),
                abi.SEND_TOOL_CALL_LIMIT,
                f"max_iterations ({limits.max_iterations}) reached with tool calls unanswered",
            )
            return
        budget = limits.max_total_tokens
        if budget is not None and self.stats.usage.total_tokens > budget:
            self._stop_at_limit(
                LimitHit("max_total_tokens", budget),
                abi.SEND_TOKEN_BUDGET,
                f"{self.stats.usage.total_tokens} tokens used, over max_total_tokens ({budget})",
            )
            return
        # Empty here: every earlier call was answered.
        self._queue.clear()
        self._queue.extend(calls)
        self.state = next_state(self.state, _CALLS_RECEIVED)

    def _advance_calls(self) -> CallTool | CallTools | None:
        """Answer what needs no guest; return the next CallTool, or None when done."""
        while self._queue:
            call = self._queue[0]
            verdict = admission(call, self._tools, self.limits, self.stats, self._cache,
                                self._approved)
            if not isinstance(verdict, tuple):
                if self._not_run(call, verdict):
                    return None
                continue
            tool, key = verdict
            self.stats.tool_calls += 1
            action = CallTool(call, tool, call.arguments)
            if self._parallel and len(self._queue) > 1:
                batch = self._batch(action, key)
                if batch is not None:
                    self._awaiting = batch
                    return batch
            self._in_flight_key = key
            self._awaiting = action
            return action
        self.state = next_state(self.state, _CALLS_ANSWERED)
        return None

    def _not_run(self, call: ToolCall, verdict: Skip | Cached | Stop) -> bool:
        """Act on admission's verdict on `call` (the queue's head), which does
        not run it; True when that ends the send."""
        if isinstance(verdict, Cached):
            self._queue.popleft()
            self.session.answer(call.id, verdict.content)
            self.notes.append(ToolSkipped(call=call, code=CACHE_HIT))
            return False
        if isinstance(verdict, Skip):
            return self._skip(call, verdict.code, verdict.message)
        if verdict is Stop.HOLD:
            self._hold(call)
            return True
        most = self.limits.max_total_tool_calls
        self._stop_at_limit(LimitHit("max_total_tool_calls", most), abi.SEND_TOOL_CALL_LIMIT,
                            f"max_total_tool_calls ({most}) reached")
        return True

    def _batch(self, first: CallTool, key: CacheKey | None) -> CallTools | None:
        """`first` and the calls after it that simply run, as one CallTools
        (chat/batch.py); None: `first` runs alone."""
        admitted = admit_batch(first, key, self._queue, tools=self._tools, limits=self.limits,
                               stats=self.stats, cache=self._cache, approved=self._approved)
        if admitted is None:
            return None
        batch, self._batch_keys = admitted
        return batch

    def _next_completion(self) -> Complete:
        """The next completion: the transcript as it stands, the tools on offer."""
        stats = self.stats
        stats.iterations += 1
        complete = Complete(self.session.messages, self._specs, stats.iterations)
        self._awaiting = complete
        return complete

    def _tool_content(self, outcome: ToolOutcome) -> str:
        key, self._in_flight_key = self._in_flight_key, None
        content, own = output_content(outcome, self.limits.max_tool_output_bytes)
        if own and key is not None and self.limits.cache_tool_results:
            self._cache[key] = content  # only successes: failures may be transient
        return content


__all__ = ["CACHE_HIT", "INTERNAL_ERROR", "LOOP_ERROR_CODES", "TOOL_DENIED",
           "UPSTREAM_BAD_RESPONSE", "LoopProtocolError", "LoopState", "ToolLoop"]
