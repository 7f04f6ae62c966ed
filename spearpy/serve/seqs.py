"""A run's event ids across resumes: one increasing sequence per run.

A resumed run (the service restarted, or the run's worker died) executes
again from its start, answered by its journal, and its events start again
at seq 0. The ids a client sees (the SSE `id`, the stored seq) must go on
from the last one stored instead, never repeating one, so a client that
reconnects with Last-Event-ID sees one run.

Replayed from the same journal, the guest does what it did before: its
events come in the same order. Those the interrupted attempt had emitted
already (the same kind at the same seq) are stored and shown once; from the
first that is new, or that differs (a streamed reply's tokens are not
replayed), each gets the next free id, keeping the gaps between seqs.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# The kinds of one attempt kept to match the next against: a run's stored
# events are bounded (serve/runs.py), so are these.
MAX_KINDS = 100_000


@dataclass
class EventSeqs:
    """`before`: the event kinds the interrupted attempt emitted, by seq;
    `next_id`: the first id not used yet."""

    before: list[str] = field(default_factory=list)
    next_id: int = 0
    _kinds: list[str] = field(default_factory=list)  # this attempt's, for the next resume
    _shift: int | None = None  # id - seq once the events are new; None: still matching

    def id_of(self, seq: int, kind: str) -> int | None:
        """The id of this attempt's event `seq`, or None when the attempt
        before emitted it already."""
        if seq == len(self._kinds) and seq < MAX_KINDS:
            self._kinds.append(kind)
        if self._shift is None:
            if seq < len(self.before) and self.before[seq] == kind:
                return None
            self._shift = self.next_id - seq
        event_id = seq + self._shift
        self.next_id = max(self.next_id, event_id + 1)
        return event_id

    def marker(self) -> int:
        """An id for the service's own event (the `run_resumed` marker)."""
        event_id = self.next_id
        self.next_id += 1
        return event_id

    def new_attempt(self) -> int:
        """The run starts again (its worker died): what this attempt emitted
        is what the next one is matched against. The marker's id."""
        if self._kinds:
            self.before, self._kinds = self._kinds, []
        self._shift = None
        return self.marker()
