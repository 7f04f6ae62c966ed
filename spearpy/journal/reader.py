"""JournalReader: a journal's answers served back, in order, to a replay.

The replayer asks for each outside-world answer as the guest needs it
(`next_answer(kind, request)`); the journal's next step must be of that kind
and for the same request, else ReplayDiverged names the step and the first
difference, in the words of the cassette replay. Outputs the guest makes
itself (guest tool outputs) are re-made on replay and `check`ed. Records
are read from the store a page at a time.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from spearpy._jsondiff import first_difference
from spearpy._term import one_line
from spearpy.journal.errors import JournalError, ReplayDiverged
from spearpy.journal.records import (
    End,
    Record,
    Start,
    Step,
    kind_of,
    sha256_json,
    stored_answer,
    stored_request,
)
from spearpy.journal.store import JournalStore
from spearpy.journal.writer import MIN_SECRET_LENGTH
from spearpy.observe.scrub import SecretScrubber

START_CHECKED = ("module_sha256", "argv", "stdin_sha256", "flags")
"""What a resume or replay must share with the journaled run."""


class JournalReader:
    def __init__(self, store: JournalStore, journal_id: str, *,
                 secrets: Iterable[str] = ()) -> None:
        self.journal_id = journal_id
        # The same scrubbing as the writer, so a request compares with its stored form.
        self.scrubber = SecretScrubber(secrets, min_length=MIN_SECRET_LENGTH)
        self._records: Iterator[Record] = store.records(journal_id)
        first = next(self._records, None)
        if not isinstance(first, Start):
            raise JournalError(f"journal {journal_id!r} is empty: no start record")
        self.start: Start = first
        self._broken: JournalError | None = None
        self._next: Record | None = self._read_next()
        self.served = 0  # steps answered so far

    def _read_next(self) -> Record | None:
        """The next record. A damaged one stops the reader for good: its
        error again at every later step, never "no more steps" (which
        would let a resume go live past the damage and append after it)."""
        try:
            return next(self._records, None)
        except JournalError as exc:
            self._broken = exc  # raised when the step it should have been is asked for
            return None

    @property
    def next_seq(self) -> int:
        return self.served + 1

    @property
    def end(self) -> End | None:
        """The end record, once every step before it has been served."""
        return self._next if isinstance(self._next, End) else None

    @property
    def exhausted(self) -> bool:
        """No step left to serve: from here the run goes on live (or has ended)."""
        return self._broken is None and not isinstance(self._next, Step)

    def check_start(self, start: Start, fields: Iterable[str] = START_CHECKED) -> None:
        """ReplayDiverged at step 0 when `start` differs from the journal's in `fields`."""
        for name in fields:
            recorded, got = getattr(self.start, name), getattr(start, name)
            if isinstance(recorded, tuple):
                recorded, got = list(recorded), list(got)
            difference = first_difference(recorded, got, name)
            if difference is not None:
                raise ReplayDiverged(0, f"journal {self.journal_id!r} step 0 (start) "
                                        f"diverges at {difference}")

    def next_answer(self, kind: str, request: Any) -> Any:
        """The journaled answer to the guest's next outside-world request."""
        if not kind_of(kind).replayed:
            raise JournalError(f"{kind} outputs are re-made on replay: check() them")
        return self._take(kind, request).answer

    def check(self, kind: str, request: Any, answer: Any) -> None:
        """The guest re-made an output (a guest tool's): it must be the journaled one."""
        spec = kind_of(kind)
        step = self._take(kind, request)
        got = stored_answer(spec, answer, self.scrubber)
        if got != step.answer:
            raise ReplayDiverged(step.seq, f"journal {self.journal_id!r} step {step.seq} "
                                           f"({kind}) diverges at the answer: recorded "
                                           f"{_short(step.answer)}, got {_short(got)}")

    def _take(self, kind: str, request: Any) -> Step:
        spec = kind_of(kind)
        if self._broken is not None:
            raise self._broken
        seq = self.next_seq
        where = f"journal {self.journal_id!r} step {seq}"
        step = self._next
        if not isinstance(step, Step):
            how = f"the run ended there ({one_line(step.outcome)}, exit {step.exit_code})" \
                if isinstance(step, End) else "the journal holds no more"
            raise ReplayDiverged(seq, f"{where} goes beyond the journal: the guest asked for "
                                      f"{kind!r}, and {how}")
        if step.kind != kind:
            raise ReplayDiverged(seq, f"{where} diverges: the journal has {step.kind!r}, "
                                      f"the guest asked for {kind!r}")
        inline, digest = stored_request(spec, request, self.scrubber)
        if digest is not None or step.request_sha256 is not None:
            recorded = step.request_sha256 or sha256_json(step.request)
            got = digest or sha256_json(inline)
            difference = None if recorded == got else \
                f"request_sha256: recorded {recorded[:16]}..., got {got[:16]}..."
        else:
            difference = first_difference(step.request, inline, "request")
        if difference is not None:
            raise ReplayDiverged(seq, f"{where} ({kind}) diverges at {difference}")
        self.served += 1
        self._next = self._read_next()
        return step


def _short(value: Any) -> str:
    text = value.hex() if isinstance(value, bytes) else repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
