"""The run ends the run store has not written yet: on their way to the disk,
or refused by it and written again later. Reads show them in place of the
stored record, so the live service never calls a finished run running."""

from __future__ import annotations

import json
import threading
from typing import Any

from spearpy.serve.store_rows import UnstoredEnd

# Refused ends' stored output (stdout, stderr, transcripts, log lines) is kept
# in memory up to this many bytes in all; past it an end keeps its outcome,
# not its output. Past MAX_ENDS refused ends the oldest is given up (a restart
# then marks its run interrupted, as before any of this).
MAX_OUTPUT_BYTES = 64 << 20
MAX_ENDS = 10_000


class UnstoredEnds:
    """Each run's end until the disk takes it; any thread."""

    def __init__(self) -> None:
        self._ends: dict[str, UnstoredEnd] = {}  # guarded by _lock
        self._refused = 0
        self._refused_output_bytes = 0
        self._lock = threading.Lock()

    def add(self, run_id: str, end: UnstoredEnd) -> None:
        with self._lock:
            self._ends[run_id] = end

    def ended(self, run_id: str, end: UnstoredEnd, stored: bool) -> None:
        """Its first write is done: stored, or refused (kept, within the bounds)."""
        with self._lock:
            if stored:
                self._ends.pop(run_id, None)
                return
            end.refused = True
            self._refused += 1
            if self._refused_output_bytes + end.output_bytes > MAX_OUTPUT_BYTES:
                end.drop_output()
            self._refused_output_bytes += end.output_bytes
            if self._refused > MAX_ENDS:
                oldest = next(r for r, e in self._ends.items() if e.refused)
                self._forget(oldest)

    def stored_again(self, run_id: str, end: UnstoredEnd) -> None:
        """A refused end the disk took on a later try."""
        with self._lock:
            if self._ends.get(run_id) is end:
                self._forget(run_id)

    def _forget(self, run_id: str) -> None:
        end = self._ends.pop(run_id)
        self._refused -= 1
        self._refused_output_bytes -= end.output_bytes

    def refused(self) -> list[tuple[str, UnstoredEnd]]:
        """The refused ends, oldest first."""
        with self._lock:
            return [(run_id, end) for run_id, end in self._ends.items() if end.refused]

    def has_refused(self) -> bool:
        with self._lock:
            return self._refused > 0

    def get(self, run_id: str) -> UnstoredEnd | None:
        with self._lock:
            return self._ends.get(run_id)

    def ids_json(self) -> str:
        """The runs with an end here, as a JSON list (for SQLite's json_each)."""
        with self._lock:
            return json.dumps(list(self._ends))

    def over(self, record: dict[str, Any]) -> dict[str, Any]:
        """`record` as read from the disk, with its run's end if one is here."""
        end = self.get(record["id"])
        return record if end is None else end.over(record)
