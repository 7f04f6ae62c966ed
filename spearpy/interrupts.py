"""Why a run (or the tool call inside it) must stop now, and the waits that
honour it.

One object per run owns everything that can end it early: the cancel event
an embedder sets, the run deadline, the deadline of the tool call in
progress, and an interrupt the host noted (a limit, a trap it caused). Its
waits block on the run's waker, which the Host's ticker wakes on cancel.
wasm code is stopped through the epoch callback (`_native`), which asks
`reason()` at every tick.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from spearpy.errors import HostInterrupt
from spearpy.fds import Waker
from spearpy.outcome import Outcome

Reason = tuple[Outcome, str]


class Interrupts:
    __slots__ = ("_note_lock", "_noted", "_run_timeout", "_tool_timeout_note", "before_block",
                 "cancel_event", "deadline", "tool_deadline", "tool_timeout", "waker")

    def __init__(self, *, timeout: float | None, tool_timeout: float | None,
                 cancel: threading.Event | None = None) -> None:
        self.cancel_event = cancel or threading.Event()
        self.waker = Waker()
        self.deadline = time.monotonic() + timeout if timeout else None
        self.tool_deadline: float | None = None
        self._run_timeout = timeout
        # Seconds each tool call may take (None: no limit); read, never changed.
        self.tool_timeout = tool_timeout
        self._noted: Reason | None = None
        self._tool_timeout_note: str | None = None
        # The guest's thread and a canceller (Host.close, the MCP bridge, a
        # signal) may note at once: without it both could see nothing noted
        # and the later one would replace the first.
        self._note_lock = threading.Lock()
        # Called on the guest's thread before it waits for the world (a run's
        # journal writes out what it holds: the wait may be long).
        self.before_block: Callable[[], None] | None = None

    # ---- what is in force ------------------------------------------------

    def reason(self) -> Reason | None:
        """Why the guest must stop now (the tool call only, for tool_timeout)."""
        reason = self.run_reason()
        if reason is None and self.tool_deadline is not None and \
                time.monotonic() >= self.tool_deadline:
            return (Outcome.TOOL_TIMEOUT,
                    f"the tool exceeded its {_seconds(self.tool_timeout)}deadline")
        return reason

    def run_reason(self) -> Reason | None:
        """Like `reason`, but only what ends the whole run (a send asks before
        every step of its loop). A noted reason is never a tool's."""
        if self._noted is not None:
            return self._noted
        if self.cancel_event.is_set():
            return Outcome.CANCELLED, "the run was cancelled"
        if self.deadline is not None and time.monotonic() >= self.deadline:
            return Outcome.TIMEOUT, f"the run exceeded its {_seconds(self._run_timeout)}deadline"
        return None

    @property
    def noted(self) -> Reason | None:
        """The interrupt the host noted, which decides how the run ended."""
        return self._noted

    def effective_deadline(self) -> float | None:
        """The earliest deadline in force now: the run's, or inside a tool its own."""
        run, tool = self.deadline, self.tool_deadline
        if tool is None:
            return run  # the usual case, asked at every completion: no list, no min()
        return tool if run is None or tool < run else run

    # ---- changing it -----------------------------------------------------

    def note(self, outcome: str, message: str) -> None:
        """Record why the guest was stopped; the first run-ending reason wins."""
        outcome = Outcome(outcome)
        if outcome is Outcome.TOOL_TIMEOUT:
            self._tool_timeout_note = message
            return
        with self._note_lock:
            if self._noted is None:
                self._noted = (outcome, message)

    def take_tool_timeout(self) -> str | None:
        note, self._tool_timeout_note = self._tool_timeout_note, None
        return note

    def cancel(self, outcome: str, message: str) -> None:
        """End the run from another thread: noted, and every wait wakes."""
        self.note(outcome, message)
        self.cancel_event.set()
        self.waker.wake()

    def arm_tool(self) -> bool:
        """Start one tool call's deadline; False when there is none to arm or a
        nested call (a tool's own send running tools) keeps the outer one.
        A plain flag, not a context manager: this is on every tool call's path."""
        if self.tool_timeout is None or self.tool_deadline is not None:
            return False
        self.tool_deadline = time.monotonic() + self.tool_timeout
        return True

    def disarm_tool(self) -> None:
        self.tool_deadline = None

    # ---- acting on it ----------------------------------------------------

    def raise_if_run_ends(self) -> None:
        """End the guest (HostInterrupt, a trap) if the whole run must stop."""
        reason = self.run_reason()
        if reason is not None:
            raise HostInterrupt(*reason)

    def raise_if_any(self) -> None:
        reason = self.reason()
        if reason is not None:
            raise HostInterrupt(*reason)

    def block_until(self, done: Callable[[], bool], seconds: float | None) -> None:
        """Wait on the waker until `done()`, for at most `seconds` (None: no
        limit of its own), never past the run deadline nor (inside a tool) the
        tool's; a cancel or a deadline ends the guest (HostInterrupt)."""
        end = None if seconds is None else time.monotonic() + max(0.0, seconds)
        for limit in (self.deadline, self.tool_deadline):
            if limit is not None and (end is None or end > limit):
                end = limit
        self.raise_if_any()
        if self.before_block is not None and not done():
            self.before_block()
        self.waker.wait_until(lambda: done() or self.reason() is not None, end)
        self.raise_if_any()

    def wait(self, seconds: float) -> None:
        """Sleep for the guest (see block_until)."""
        self.block_until(_never, seconds)


def _never() -> bool:
    return False


def _seconds(limit: float | None) -> str:
    # A deadline set without its configured limit (an embedder or a test
    # setting `deadline` directly) still gets a message, never a crash.
    return f"{limit:g} s " if limit is not None else ""
