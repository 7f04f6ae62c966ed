"""What the journal raises. All are SpearpyError: an embedder catches one base."""

from __future__ import annotations

from spearpy._term import one_line
from spearpy.errors import SpearpyError


class JournalError(SpearpyError):
    """A journal cannot be opened, written or read (bad id, unreachable store,
    a record that is not JSON, appending after the end)."""


class JournalFull(JournalError):
    """An append would take the journal past its byte cap (`max_journal_bytes`).
    Nothing of that record is stored."""


class JournalBusy(JournalError):
    """Another writer holds the journal: two writers would interleave their steps."""


class JournalCorrupt(JournalError):
    """A stored record is damaged or out of order. Never skipped: a journal that
    is not exact cannot be replayed."""


class ReplayDiverged(JournalError):
    """The guest asked for something other than what the journal holds at that
    step (another kind or request), or for more than it holds."""

    code = "replay_diverged"

    def __init__(self, step: int, message: str) -> None:
        super().__init__(message)
        self.step = step


def said(error: object) -> str:
    """An error about what a journal held (a run's start refused: its argv,
    limits, flags), on one line and short: the file may be hand-made."""
    return one_line(str(error), 500)


def shown(value: object) -> str:
    """What a journal file held, in an error message: its repr, escaped and
    short (the file may be damaged or hand-made; errors reach terminals)."""
    return one_line(repr(value), 80)
