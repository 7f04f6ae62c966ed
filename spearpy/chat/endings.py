"""How a ToolLoop's send ends (chat/loop.py), in one step whichever way:
the session is left with every tool call of its last assistant message
answered (auto sends), the final Done or Failed is fixed, metrics are
written. ToolLoop takes these as its base class: they read and change the
loop's own state, whose types are declared here.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import NoReturn

from spearpy.chat.batch import CacheKey
from spearpy.chat.bodies import INTERNAL_ERROR, done_body, error_body, held_body, metrics, summary
from spearpy.chat.protocol import (
    CallTool,
    CallTools,
    Complete,
    Done,
    Failed,
    JSONDict,
    LimitHit,
    LoopLimits,
    LoopNote,
    SendStats,
    ToolCall,
    ToolSkipped,
)
from spearpy.chat.session import NOT_RUN, ChatSession, tool_error_content
from spearpy.chat.states import LoopEvent, LoopProtocolError, LoopState, next_state


class SendEndings:
    session: ChatSession
    limits: LoopLimits
    stats: SendStats
    state: LoopState
    backend: str
    model: str
    notes: list[LoopNote]
    _queue: deque[ToolCall]
    _awaiting: Complete | CallTool | CallTools | None
    _final: Done | Failed | None
    _batch_keys: list[CacheKey | None]
    _reply: tuple[JSONDict, JSONDict] | None
    _metrics_enabled: bool
    _clock: Callable[[], float]
    _started: float

    def _hold(self, call: ToolCall) -> None:
        """End the send with `call` and the calls after it pending for the guest,
        which answers them itself or approves them by sending AUTO again."""
        pending = [queued.id for queued in self._queue]
        self._queue.clear()
        if self._reply is None:  # held at the start: only a new reply is ever held
            self._misuse("a call was held without a reply to return")
        body, message = self._reply
        self._end(Done(held_body(body, message, self._summary(), call, pending)),
                  LoopEvent.HELD)

    def _skip(self, call: ToolCall, code: str, message: str) -> bool:
        """Answer `call` with an error for the model; True when that ends the send."""
        self._queue.popleft()
        self.session.answer(call.id, tool_error_content(code, message))
        self.notes.append(ToolSkipped(call=call, code=code, message=message))
        if not self.limits.strict_tools:
            return False
        self._answer_rest_not_run(f"strict_tools: the send ended at an earlier call ({code})")
        self._fail(code, message)
        return True

    def _stop_at_limit(self, hit: LimitHit, code: str, message: str) -> None:
        self.notes.append(hit)
        self._answer_rest_not_run(message)
        self._fail(code, message)

    def _answer_rest_not_run(self, message: str) -> None:
        self._queue.clear()
        for call in self.session.answer_pending(NOT_RUN, message):
            self.notes.append(ToolSkipped(call=call, code=NOT_RUN, message=message))

    def _finish(self, body: JSONDict) -> None:
        spear = self._summary()
        self._end(Done(done_body(body, self.session.messages[-1], spear)), LoopEvent.FINISHED)

    def _fail(self, code: str, message: str, *, status: int | None = None,
              details: JSONDict | None = None) -> None:
        self._end(Failed(error_body(code, message, self._summary(), status, details)),
                  LoopEvent.FAIL)

    def _end(self, final: Done | Failed, event: LoopEvent) -> None:
        self.state = next_state(self.state, event)
        self._final = final
        self.session.last_metrics = metrics(final.body["_spear"]) if self._metrics_enabled \
            else {}

    def _misuse(self, message: str) -> NoReturn:
        if self._final is None:
            self._awaiting = None
            self._batch_keys = []
            self._queue.clear()
            self.session.answer_pending(INTERNAL_ERROR, "the host aborted the send")
            self._fail(INTERNAL_ERROR, message)
        raise LoopProtocolError(message)

    def _summary(self) -> JSONDict:
        return summary(self.backend, self.model, self.stats, self._clock() - self._started)
