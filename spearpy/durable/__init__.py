"""Durable runs (docs/durable.md): a run's journal at the run core's seams.

`JournalSpec` says where a run's journal is and what the run does with it
(record, resume, replay, fork); `RunJournal` is the journal of one run,
answering from its steps while it replays and recording the outside world's
answers once live. The journal's format and stores are spearpy.journal.
"""

from spearpy.durable.grants import journal_grants
from spearpy.durable.run_journal import RunJournal
from spearpy.durable.spec import (
    JournalSpec,
    bind_journal,
    open_run_journal,
    read_start,
    run_arguments,
    run_flags,
    run_start,
)

__all__ = ["JournalSpec", "RunJournal", "bind_journal", "journal_grants", "open_run_journal",
           "read_start", "run_arguments", "run_flags", "run_start"]
