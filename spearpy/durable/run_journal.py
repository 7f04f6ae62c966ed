"""One run's journal: what it records live, what it serves back on replay.

A run with a journal records every answer it observes from the outside
world, at three seams: the hostcall families (`hostcall`: an outside-world
hostcall's result and the bytes it wrote into guest memory), the driver's
completions (`chat.completion`) and its calls of tools that are not the
guest's (`tool.outcome`). Guest tools re-execute; their outputs are checked
(`guest_tool.output`).

Replaying, the journal answers instead of the world while it has steps:
nothing is sent upstream, no clock is read, no sleep waits. A resumed run
then goes on live, appending to the same journal; a replay stops where the
journal does (or at `--until`); a fork copies the steps it replays into a
new journal and goes on live with other flags from there.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from spearpy.chat.protocol import CompletionResult, ToolOutcome, UpstreamError
from spearpy.durable.digests import RequestDigests
from spearpy.durable.golive import GoLiveHook, refusals
from spearpy.durable.recording import RecordingMemory
from spearpy.errors import HostInterrupt
from spearpy.journal import (
    JournalCorrupt,
    JournalError,
    JournalFull,
    JournalWriter,
    ReplayDiverged,
)
from spearpy.journal.hostcall_answers import clock_micros, hostcall_rc, hostcall_writes
from spearpy.journal.records import Digested
from spearpy.journal.shapes import served_answer
from spearpy.memory import GuestFault
from spearpy.outcome import Outcome

if TYPE_CHECKING:
    from spearpy.backends.base import CompletionRequest
    from spearpy.context import RunContext
    from spearpy.journal import JournalReader
    from spearpy.observe.scrub import SecretScrubber

HostcallFn = Callable[..., "int | None"]


# Answers a guest keeps reading without asking the world anything (a stream's
# frames, a clock) are written out at least this often while it reads on.
ANSWERS_WAIT_S = 0.05


class RunJournal:
    """The journal of one run, bound to it by `bind` before the guest starts.

    `reader`: the steps to serve first (resume, replay, fork); `writer`:
    where live steps go (None for a pure replay). `until`: the last step
    served (a fork's --fork-at; the one before a replay's --until). `copy`:
    append each replayed step to the writer too (a fork's new journal)."""

    def __init__(self, *, writer: JournalWriter | None = None,
                 reader: JournalReader | None = None, until: int | None = None,
                 copy: bool = False) -> None:
        self.writer = writer
        self.reader = reader
        self.until = until
        self.copy = copy
        self._run: RunContext | None = None
        self._elapsed_ms = 0.0  # of the journaled run when this one went live
        self._live_since = time.monotonic()
        self._went_live = reader is None
        self._unsynced = False  # appended since the last sync
        # fd -> the replayed call that would have set it up (a mic's source, an
        # rtasr connection): host state no answer rebuilds; its family's
        # go-live hook must, or the run cannot go live.
        self._unbuilt: dict[int, str] = {}
        self._at_go_live: list[GoLiveHook] = []  # the families that rebuild them
        self._refused_live = False  # it could not go live: not how its run ended
        self._digests = RequestDigests()
        # Live with a writer: nothing is replayed from here on (a reader
        # used up, or past `until`, stays so), which the loop's two records
        # per iteration check first.
        self._live = False

    # ---- lifecycle ----------------------------------------------------------

    def at_go_live(self, hook: GoLiveHook) -> None:
        """`hook` rebuilds, when the run goes live, the host state of fds its
        family set up from the journal (spearpy/durable/golive.py)."""
        if hook not in self._at_go_live:
            self._at_go_live.append(hook)

    def bind(self, run: RunContext) -> None:
        self._run = run
        self._live_since = run.started
        if self.writer is not None:
            run.interrupts.before_block = self._before_block
            self.writer.max_wait = ANSWERS_WAIT_S

    def sync(self) -> None:
        """A send completed: make what it journaled durable (policy `send`).
        A send that appended nothing (a replayed one) costs no fdatasync."""
        if self.writer is not None and self._unsynced:
            self._written(self.writer.sync)
            self._unsynced = False

    def end(self, outcome: str, exit_code: int) -> None:
        """Write the end record and close the journal. Its run has ended
        whatever comes of that: a write or the last send's sync failing
        here is logged, not raised to the run's caller."""
        writer = self.writer
        if writer is None:
            return
        try:
            try:
                # Stopped before catching up with its journal (diverged,
                # cancelled mid-replay): that is not how the journaled run
                # ended, and an end record would refuse the resume that works
                # once the cause (a changed file, the wrong module) is put right.
                if not self.replaying and not self._refused_live:
                    writer.end(outcome, exit_code)
            finally:
                writer.close()
        except JournalError as exc:
            from spearpy.observe.logger import get_logger

            get_logger("spearpy").error(
                "the run's journal could not be ended", journal=writer.journal_id,
                run_id=self._run.run_id if self._run is not None else None, error=str(exc))

    @property
    def replaying(self) -> bool:
        reader = self.reader
        if reader is None or reader.exhausted:
            return False
        return self.until is None or reader.next_seq <= self.until

    # ---- the three seams ------------------------------------------------------

    def hostcall(self, run: RunContext, call: str, args: tuple[int, ...],
                 fn: HostcallFn, *, sets_up_fd: bool = False,
                 answers_only: bool = False, rc_bits: int = 64) -> int | None:
        """An outside-world hostcall: its journaled result and memory writes
        when replaying, else the call itself, recorded. One that asks or
        tells the world something has what was journaled before it written
        out first; one that only answers (`answers_only`: a clock, a frame
        already delivered) does not wait for that: they are written while it
        waits if it blocks (`_before_block`), and on the flusher thread once
        the oldest is older than ANSWERS_WAIT_S."""
        answer = None if self._live else \
            self._replayed("hostcall", {"call": call, "args": list(args)})
        if answer is not None:
            if sets_up_fd and args:
                self._unbuilt[args[0]] = call
            writes = hostcall_writes(answer)
            for ptr, data in writes:  # all in memory before any is made
                self._served_check(run.memory.check, call, ptr, len(data))
            rc: int | None = self._served_check(hostcall_rc, call, answer, rc_bits)
            for ptr, data in writes:
                run.memory.write(ptr, data)
            return rc
        if not answers_only:
            self._before_world_call()
        recorder = RecordingMemory(run.memory)
        run.memory = recorder
        try:
            rc = fn(run, *args)
        finally:
            run.memory = recorder.inner
        self._record(JournalWriter.append_hostcall, call, args, rc, recorder.writes, self._t())
        return rc

    def clock(self) -> float:
        """The send loop's clock (a send's elapsed_ms reaches the guest): ms
        into the run, journaled like any other reading of the world, and
        continuous across a resume."""
        answer = None if self._live else \
            self._replayed("hostcall", {"call": "host.clock", "args": []})
        if answer is not None:
            micros: int = self._served_check(clock_micros, "hostcall", answer)
            return micros / 1e6
        t = self._t()
        micros = round(t * 1000)
        self._record(JournalWriter.append_hostcall, "host.clock", (), micros, (), t)
        # The replayed reading, not t / 1000: the two differ in the last bit,
        # enough to round a send's elapsed_ms the other way on replay.
        return micros / 1e6

    def completion(self, request: CompletionRequest,
                   complete: Callable[[], CompletionResult | None]) -> CompletionResult | None:
        """One completion of a send: journaled, or asked upstream and recorded
        (a cancelled one, None, is not an answer and is not recorded)."""
        digest = self._digests.of(request, self._scrubber_any())
        # Its stored form is needed only to compare or copy a replayed step.
        answer = None if self._live else self._replayed(
            "chat.completion", Digested(digest) if self.replaying else None)
        if answer is not None:
            error = answer.get("error")
            return CompletionResult(backend=answer["backend"], model=answer["model"],
                                    body=answer.get("body"),
                                    error=UpstreamError(**error) if error else None,
                                    latency_ms=float(answer.get("latency_ms", 0.0)))
        self._before_world_call()
        result = complete()
        if result is not None:
            error = result.error
            self._record(JournalWriter.append_completion, digest, {
                "backend": result.backend, "model": result.model, "body": result.body,
                "error": asdict(error) if error is not None else None,
                "latency_ms": result.latency_ms, "t": self._t()}, result.raw)
        return result

    def tool(self, source: str, name: str, arguments: str,
             call: Callable[[], ToolOutcome]) -> ToolOutcome:
        """A call of a tool that is not the guest's (MCP, Python)."""
        request = {"source": source, "name": name, "arguments": arguments}
        answer = self._replayed("tool.outcome", request)
        if answer is not None:
            fields = {k: v for k, v in answer.items() if k != "t"}
            return ToolOutcome(**fields)
        self._before_world_call()
        outcome = call()
        self._append("tool.outcome", request, {**asdict(outcome), "t": self._t()})
        # Written at once: a batch (driver/parallel.py) records its calls'
        # outcomes here and starts more calls while fewer than its limit are
        # started and not yet written, which a crash would make again.
        self._before_world_call()
        return outcome

    def guest_tool(self, name: str, arguments: str, outcome: ToolOutcome) -> None:
        """A guest tool ran (live or replaying): replaying, its output must be
        the journaled one; live, its digest is recorded."""
        reader = self.reader
        if reader is not None and self.replaying:
            request = {"name": name, "arguments": arguments}
            answer = [outcome.ok, outcome.output, outcome.error_code]
            self._diverged_as_interrupt(lambda: reader.check("guest_tool.output", request,
                                                             answer))
            if self.copy:
                self._append("guest_tool.output", request, answer)
            return
        if not self._live:
            self._stop_if_replay_only("guest_tool.output")
        self._record(JournalWriter.append_guest_output, name, arguments, outcome.ok,
                     outcome.output, outcome.error_code)

    def live_batch(self) -> bool:
        """Whether the calls of one reply may run at once (driver/parallel.py):
        the journal has nothing left to serve and live steps are written, so
        the run goes live here, as its first live call would. Else the calls
        are asked one by one, each answered, checked or refused as ever. The
        batch's outcomes are then recorded with `tool` / `guest_tool` in the
        model's order, so a batch replays like calls made one by one."""
        if self.replaying or self.writer is None:
            return False
        self._go_live()
        self._before_world_call()
        return True

    # ---- replaying and recording ------------------------------------------------

    def _replayed(self, kind: str, request: Any) -> dict[str, Any] | None:
        """The journaled answer while replaying; None once live."""
        if self._live:
            return None
        if not self.replaying:
            self._stop_if_replay_only(kind)
            self._go_live()
            self._live = self.writer is not None
            return None
        reader = self.reader
        assert reader is not None
        answer: dict[str, Any] = self._diverged_as_interrupt(
            lambda: reader.next_answer(kind, request))
        self._served_check(served_answer, kind, kind, answer)
        if self.copy:
            self._append(kind, request, answer)
        if "t" in answer:  # a number of ms (hostcall_answers.is_ms)
            self._elapsed_ms = float(answer["t"])
        return answer

    def _served_check(self, check: Callable[..., Any], what: str, *args: Any) -> Any:
        """check(*args) of the step just served; a JournalCorrupt or GuestFault
        (a write outside guest memory) it raises stops the replay there."""
        try:
            return check(*args)
        except (JournalCorrupt, GuestFault) as exc:
            reader = self.reader
            assert reader is not None
            raise HostInterrupt(Outcome.REPLAY_MISMATCH, (
                f"journal {reader.journal_id!r} step {reader.served} ({what}) cannot be "
                f"replayed: {exc}")) from None

    def _stop_if_replay_only(self, kind: str) -> None:
        """A replay that reached the end of what it may serve stops there."""
        reader = self.reader
        if reader is None or self.writer is not None:
            return
        if self.until is not None and reader.next_seq > self.until:
            raise HostInterrupt(Outcome.CANCELLED,
                                f"replay stopped before step {reader.next_seq}, as asked")
        self._diverged_as_interrupt(lambda: reader.next_answer(kind, None))

    def _go_live(self) -> None:
        """From here the world answers. The run gets the time its journaled
        run had left, not its whole timeout again."""
        if self._went_live:
            return
        self._went_live = True
        self._live_since = time.monotonic()
        run = self._run
        if run is not None:
            refused = refusals(run, self._at_go_live, self._unbuilt)
            if refused:
                self._refused_live = True
                raise HostInterrupt(Outcome.REPLAY_MISMATCH, (
                    f"journal step {self.reader.next_seq if self.reader else 0}: the run cannot "
                    f"go on live: {refused} (docs/durable.md); replay it instead"))
        if run is not None and run.config.timeout:
            left = max(run.config.timeout - self._elapsed_ms / 1000.0, 0.0)
            run.interrupts.deadline = self._live_since + left

    def _t(self) -> float:
        return round(self._elapsed_ms + (time.monotonic() - self._live_since) * 1000.0, 3)

    def _append(self, kind: str, request: Any, answer: Any) -> None:
        self._record(JournalWriter.append, kind, request, answer)

    def _record(self, append: Callable[..., int], *args: Any) -> None:
        """A live step appended by `append` (the writer's method for its
        kind, given `args`) and charged to the run; a full journal ends it
        memory_limit."""
        writer = self.writer
        if writer is None or not self._appending():
            return
        try:
            size = append(writer, *args)
        except JournalFull as exc:
            raise HostInterrupt(Outcome.MEMORY_LIMIT, str(exc)) from None
        self._appended(size)

    def _appending(self) -> bool:
        # The run is ending (cancelled, out of time): what the host reads
        # on its way out (the send loop's closing clock, a cancelled
        # tool's error) is no answer the guest went on with, and a
        # resume (a stopped batch input's) would diverge at it.
        return self._run is None or self._run.interrupts.run_reason() is None

    def _appended(self, size: int) -> None:
        self._unsynced = True
        if self._run is not None:
            self._run.charge(size, "the run's journal")

    def _before_block(self) -> None:
        """The guest is about to wait for the world (epoll, a sleep, poll_oneoff):
        what it was answered so far is written out while it waits, as a
        crash while it waits must not lose it (a failed write is reported
        by the next flush, before its next call of the world)."""
        writer = self.writer
        if writer is not None and writer.waiting():
            writer.flush_soon()

    def _before_world_call(self) -> None:
        """About to ask the world something this journal cannot take back (a
        completion, a tool's call): what was journaled so far is written
        first, and durable as the policy says (the last send's sync done),
        so a crash from here on loses no answer but this call's."""
        if self.writer is not None:
            self._written(self.writer.flush)

    @staticmethod
    def _written(write: Callable[[], None]) -> None:
        """The journal written out, or the run ended: a paid call made past
        records that could not be written, or a send reported done while
        they are not, would leave a journal that no longer says what the
        run was answered (its records stay with the writer, in order)."""
        try:
            write()
        except JournalError as exc:
            raise HostInterrupt(Outcome.HOST_ERROR,
                                f"the run's journal cannot be written: {exc}") from None

    def _scrubber_any(self) -> SecretScrubber:
        """The run's scrubber, which the writer and the reader share."""
        if self.writer is not None:
            return self.writer.scrubber
        assert self.reader is not None
        return self.reader.scrubber

    @staticmethod
    def _diverged_as_interrupt(read: Callable[[], Any]) -> Any:
        try:
            return read()
        except ReplayDiverged as exc:
            raise HostInterrupt(Outcome.REPLAY_MISMATCH, str(exc)) from None
        except JournalCorrupt as exc:
            # A damaged step cannot answer: the replay stops there as at the
            # end of a journal cut short, and nothing is appended after it.
            raise HostInterrupt(Outcome.REPLAY_MISMATCH,
                                f"the journal cannot be replayed past here: {exc}") from None
