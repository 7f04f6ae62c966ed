"""The calls of one reply run at once (the loop's CallTools).

Calls to sources that can run concurrently (MCP servers, Python tools) go to
worker threads, at most `max_parallel_tools` at a time, started first; the
guest's calls stay on the guest's thread (the one running the send), in the
model's order, while the others run. A batch of guest calls alone runs one
by one, as ever (no `parallel` field on its events: nothing overlapped);
the events of a batch's calls say how many of them may run at once
(overlap.py), not how many it has.
Only that thread emits events and touches the journal: a worker runs the
source's call and nothing else, then wakes the run's waker.

A cancel or the run's deadline ends the wait at once: the calls still
running are abandoned (an MCP call sees the same cancel event and deadline
and ends on its own; a Python function cannot be stopped and finishes on its
worker, its result dropped) and the loop answers them with the interrupt's
error. A batch made by a nested send inside a guest tool also stops waiting
at that tool's deadline, which fails one call and never the run: each call
still running is answered tool_exec_failed (what the guest tool cut by it
gets) and abandoned the same way, and the batch goes on.

A journaled run records the batch in the model's order, so its journal reads
as if the calls had run one by one (journals written before batches were
exactly that): a call's outcome is recorded once it and every call before
it have ended, the non-guest calls before a guest call are waited for and
recorded before the guest call runs (its hostcalls and output follow them,
as they did), and a call starts only while fewer than the limit are started
and not yet recorded, so a crash repeats at most that many. A batch the
journal still answers is answered call by call, in order, with no thread.
"""

from __future__ import annotations

import contextlib
import os
import queue
import threading
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Final

from spearpy import abi
from spearpy.chat.protocol import CallTool, CallTools, ToolOutcome
from spearpy.driver.overlap import is_guest, overlap
from spearpy.driver.upstream import _Workers
from spearpy.errors import HostInterrupt
from spearpy.outcome import Outcome

if TYPE_CHECKING:
    from spearpy.context import RunContext
    from spearpy.interrupts import Reason

ToolFn = Callable[[CallTool], ToolOutcome]
# (action, how many calls of its batch may run at once) -> None: TOOL_START,
# and TOOL_END with the outcome
Started = Callable[[CallTool, int], None]
Ended = Callable[[CallTool, ToolOutcome, int], None]

# One set of reusable daemon workers for every send of the process: a batch
# hands each call to a waiting worker (~45 us) rather than starting a thread.
_WORKERS = _Workers()
os.register_at_fork(after_in_child=_WORKERS.forget)

# A call a cut-short batch abandoned keeps its worker until it returns, and a
# Python function may never return: while this many such calls of the
# process still run, a batch answers its calls tool_exec_failed instead of
# starting them, so a tool that hangs cannot take a thread per call for ever.
MAX_STRAYS = 256


class _Strays:
    """How many abandoned calls still run (`count`, changed under `lock`)."""

    __slots__ = ("count", "lock")

    def __init__(self) -> None:
        self.forget()

    def forget(self) -> None:
        """None (in a forked child, the parent's threads are not there)."""
        self.lock = threading.Lock()
        self.count = 0


_STRAYS = _Strays()
os.register_at_fork(after_in_child=_STRAYS.forget)


class BatchCalls:
    """How a send runs a CallTools. `serial`: one call with every layer (the
    journal's replay, events); `plain`: the source's call alone (a worker's
    job); `started`/`ended`: the events around a call (None: nobody
    observes the run); `guest`: a guest call with the journal's check but no
    events."""

    __slots__ = ("_ended", "_guest", "_max_output", "_plain", "_run", "_serial", "_started")

    def __init__(self, run: RunContext, *, serial: ToolFn, plain: ToolFn, guest: ToolFn,
                 started: Started | None, ended: Ended | None, max_output: int) -> None:
        self._run = run
        self._max_output = max_output  # of one output the session keeps (_hold)
        self._serial, self._plain, self._guest = serial, plain, guest
        self._started, self._ended = started, ended

    def run(self, batch: CallTools, limit: int,
            ) -> tuple[list[ToolOutcome | None], Reason | None]:
        """Each call's outcome, in the batch's order, and what ended the run
        if something did (then a call it cut short has None)."""
        if all(is_guest(action) for action in batch.calls):
            return self._one_by_one(batch)  # nothing to run beside them
        journal = self._run.journal
        if journal is not None and not journal.live_batch():
            return self._one_by_one(batch)
        return _Batch(self, batch, max(limit, 1)).run()

    def _one_by_one(self, batch: CallTools,
                    ) -> tuple[list[ToolOutcome | None], Reason | None]:
        outcomes: list[ToolOutcome | None] = [None] * len(batch.calls)
        run = self._run
        stops, held = run.interrupts, 0
        for index, action in enumerate(batch.calls):
            if (reason := stops.run_reason()) is not None:
                return outcomes, reason
            outcome = outcomes[index] = self._serial(action)
            held = _hold(run, held, outcome, self._max_output)
        return outcomes, None


class _Batch:
    """One CallTools in progress, driven from the guest's thread."""

    def __init__(self, calls: BatchCalls, batch: CallTools, limit: int) -> None:
        self._calls = calls
        self._actions = batch.calls
        self._size = len(batch.calls)
        self._limit = limit
        run = self._run = calls._run
        self._stops = run.interrupts
        self._held = 0  # what the outcomes taken so far keep (_hold)
        self._journal = run.journal
        self._together = overlap(batch.calls, limit, self._journal is not None)
        self.outcomes: list[ToolOutcome | None] = [None] * self._size
        self._results: list[ToolOutcome | None] = [None] * self._size
        self._finished: queue.SimpleQueue[int] = queue.SimpleQueue()
        self._waiting: deque[int] = deque()  # non-guest calls not started yet
        self._running = 0
        self._started: list[int] = []  # non-guest calls handed to a worker
        self._abandoned: set[int] = set()  # of those, cut short while running (_STRAYS)
        self._recorded = 0  # calls before this index are in the journal

    def run(self) -> tuple[list[ToolOutcome | None], Reason | None]:
        try:
            return self._run_calls()
        except BaseException:
            # What ended the run mid-batch (the journal refusing a record,
            # an interrupt from a guest call) leaves no call without its
            # TOOL_END; recording stops, the journal having failed.
            self._journal = None
            self._cut_short(self._stops.run_reason() or _ABANDONED)
            raise

    def _run_calls(self) -> tuple[list[ToolOutcome | None], Reason | None]:
        calls, journaled = self._calls, self._journal is not None
        if not journaled:
            # Every non-guest call starts (up to the limit) before the
            # guest's first one, which then runs beside them.
            self._waiting.extend(i for i, a in enumerate(self._actions) if not is_guest(a))
            self._fill()
        for index, action in enumerate(self._actions):
            if not is_guest(action):
                if journaled:
                    self._waiting.append(index)
                    self._fill()
                continue
            if self._journal is not None:
                # Recorded in the model's order: what came before is first.
                reason = self._drain()
                if reason is not None:
                    return self.outcomes, reason
                self._record(index)
            else:
                self._collect()
            if (reason := self._stops.run_reason()) is not None:
                self._cut_short(reason)
                return self.outcomes, reason
            if calls._started is not None:
                calls._started(action, self._together)
            try:
                outcome = calls._guest(action)
            except BaseException:
                # What ends the guest mid-call (a run-ending interrupt) ends
                # the batch: this call and the running ones still get their
                # TOOL_END.
                why = self._stops.run_reason() or _ABANDONED
                if calls._ended is not None:
                    calls._ended(action, ToolOutcome(ok=False, error_code=str(why[0]),
                                                     error_message=why[1]), self._together)
                self._cut_short(why)
                raise
            if calls._ended is not None:
                calls._ended(action, outcome, self._together)
            self.outcomes[index] = outcome
            self._held = _hold(self._run, self._held, outcome, self._calls._max_output)
            if self._journal is not None:
                self._recorded = index + 1
        reason = self._drain()
        if reason is None and self._journal is not None:
            self._record(self._size)
        return self.outcomes, reason

    # ---- the non-guest calls ---------------------------------------------------

    def _fill(self) -> None:
        """Start waiting calls while fewer than the limit run (journaled:
        while fewer than the limit are started and not yet journaled, so a
        crash repeats at most that many)."""
        waiting, limit = self._waiting, self._limit
        while waiting and self._running < limit and (
                self._journal is None or waiting[0] - self._recorded < limit):
            index = waiting.popleft()
            action = self._actions[index]
            if self._calls._started is not None:
                self._calls._started(action, self._together)
            self._running += 1
            self._started.append(index)
            strays = _STRAYS.count
            if strays >= MAX_STRAYS:
                self._refuse(index, f"{strays} tool calls abandoned by earlier sends still run "
                                    "(a Python tool that does not return?)")
                continue
            if self._stops.tool_deadline is not None and (late := self._tool_late()):
                self._refuse(index, late)
                continue
            try:
                _WORKERS.submit(self._job(index, action))
            except Exception as exc:  # no thread to run it: the process's limit, no memory
                self._refuse(index, f"no worker thread could start ({type(exc).__name__}: "
                                    f"{exc})"[:500])

    def _refuse(self, index: int, why: str) -> None:
        """Answer a started call without running it, as if it had ended so."""
        self._results[index] = ToolOutcome(ok=False, error_code=abi.TOOL_EXEC_FAILED,
                                           error_message=f"not started: {why}")
        self._finished.put(index)

    def _tool_late(self) -> str | None:
        """Why no call may run on, when the deadline of the guest tool whose
        nested send made this batch passed (a run-ending reason is the
        batch's to obey, not this)."""
        reason = self._stops.reason()
        return reason[1] if reason is not None and reason[0] is Outcome.TOOL_TIMEOUT else None

    def _job(self, index: int, action: CallTool) -> Callable[[], None]:
        plain, results, finished = self._calls._plain, self._results, self._finished
        waker, abandoned, strays = self._stops.waker, self._abandoned, _STRAYS

        def job() -> None:
            try:
                outcome = plain(action)
            except BaseException as exc:  # a source must not raise; if one does, the model reads it
                outcome = ToolOutcome(ok=False, error_code=abi.TOOL_EXEC_FAILED,
                                      error_message=f"{type(exc).__name__}: {exc}"[:500])
            with strays.lock:
                results[index] = outcome
                if index in abandoned:
                    strays.count -= 1
            finished.put(index)
            waker.wake()

        return job

    def _collect(self) -> None:
        """Take the outcomes of calls that ended; start the next ones."""
        finished = self._finished
        while not finished.empty():
            index = finished.get()
            if self.outcomes[index] is not None:
                continue  # answered when it was abandoned: its late result is dropped
            self._running -= 1
            outcome = self._results[index]
            assert outcome is not None  # set before its index is put
            self.outcomes[index] = outcome
            self._held = _hold(self._run, self._held, outcome, self._calls._max_output)
            if self._calls._ended is not None:
                self._calls._ended(self._actions[index], outcome, self._together)
        if self._journal is not None:
            self._record_ended()
        if self._stops.run_reason() is None:
            self._fill()

    def _drain(self) -> Reason | None:
        """Wait for every started and waiting call; what ended the run, if
        something did first."""
        stops, finished = self._stops, self._finished
        while self._running or self._waiting:
            # reason(), not run_reason(): inside a guest tool, its deadline too.
            stops.waker.wait_until(
                lambda: not finished.empty() or stops.reason() is not None,
                stops.effective_deadline())
            reason = stops.run_reason()
            if reason is not None:
                self._cut_short(reason)
                return reason
            self._collect()
            if self._running and stops.tool_deadline is not None and \
                    (late := self._tool_late()) is not None:
                self._abandon(abi.TOOL_EXEC_FAILED,
                              f"{late} before this call ended (abandoned, its result dropped)")
                if self._journal is not None:
                    self._record_ended()
        return None

    def _cut_short(self, reason: Reason | tuple[str, str]) -> None:
        """On the way out: keep what ended, start nothing more, and end each
        call still running with the interrupt's error. The calls never
        started are the loop's to answer."""
        self._waiting.clear()
        self._collect()
        code, message = str(reason[0]), reason[1]
        self._abandon(code, message)
        for index in self._started:  # ended since the collect: answered alike, the run ends
            if self.outcomes[index] is None:
                self._answer(index, ToolOutcome(ok=False, error_code=code,
                                                error_message=message))

    def _abandon(self, code: str, message: str) -> None:
        """Answer each call still running with this error, its TOOL_END now;
        its worker's result, whenever it comes, is dropped."""
        with _STRAYS.lock:  # its worker's job then counts itself out
            cut = [index for index in self._started
                   if self._results[index] is None and index not in self._abandoned]
            self._abandoned.update(cut)
            _STRAYS.count += len(cut)
        for index in cut:
            self._answer(index, ToolOutcome(ok=False, error_code=code, error_message=message))

    def _answer(self, index: int, outcome: ToolOutcome) -> None:
        self.outcomes[index] = outcome
        self._running -= 1
        if self._calls._ended is not None:
            self._calls._ended(self._actions[index], outcome, self._together)

    def _record_ended(self) -> None:
        """Journal the calls that ended with every call before them."""
        upto = self._recorded
        while upto < self._size and self.outcomes[upto] is not None:
            upto += 1
        if upto > self._recorded:
            self._record(upto)

    def _record(self, upto: int) -> None:
        """Journal the non-guest outcomes of calls before `upto`, in order
        (guest calls were checked and recorded when they ran)."""
        journal = self._journal
        assert journal is not None
        for index in range(self._recorded, upto):
            action = self._actions[index]
            if is_guest(action):
                continue
            source = action.tool.source
            outcome = self.outcomes[index]
            assert outcome is not None
            journal.tool(source.kind if source is not None else "none", action.call.name,
                         action.arguments, _given(outcome))
        self._recorded = upto


# Why a call still running is answered when the send ends by an exception
# and the run gives no reason of its own.
_ABANDONED: Final = ("not_run", "the send ended before this call did")


def _hold(run: RunContext, held: int, outcome: ToolOutcome, max_output: int) -> int:
    """`held` and what `outcome` keeps until the batch is answered. The
    outcomes reach the session (and its charge against max_host_bytes) only
    then, so past what the run may keep its memory_limit is noted here: the
    batch starts no more calls and ends, as calls made one by one stop one
    output past it (a reply of thousands of calls returning megabytes each
    must not all be held first). An output counts as what the session keeps
    of it (max_tool_output_bytes), as it would one by one."""
    held += min(len(outcome.output), max_output) + len(outcome.error_message or "")
    if not run.fits(held):
        with contextlib.suppress(HostInterrupt):  # noted: the batch's next check ends it
            run.reserve_bytes(held, "the tool outputs of one reply")
    return held


def _given(outcome: ToolOutcome) -> Callable[[], ToolOutcome]:
    return lambda: outcome
