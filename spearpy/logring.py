"""The last guest log lines of a run, kept in a bounded ring (SPEAR's API
returns an execution's log lines the same way): `RunResult.logs`, the
service's `GET /v1/runs/{id}/logs`.

Bounded by lines and by bytes: a guest that logs more loses its oldest
lines, never the host's memory (the bytes it holds are charged to the run's
host budget by its caller, which gives back what an eviction frees).
"""

from __future__ import annotations

from collections import deque
from typing import Final

MAX_LINES: Final = 1000
MAX_BYTES: Final = 256 * 1024
# A line's bookkeeping beside its text (the tuple, its strings).
LINE_OVERHEAD: Final = 120


class LogRing:
    __slots__ = ("_bytes", "_lines", "dropped", "max_bytes", "max_lines")

    def __init__(self, max_lines: int = MAX_LINES, max_bytes: int = MAX_BYTES) -> None:
        self.max_lines = max_lines
        self.max_bytes = max_bytes
        self._lines: deque[tuple[str, str, int]] = deque()
        self._bytes = 0
        self.dropped = 0  # lines evicted, so a reader knows the ring is not the whole log

    @property
    def held_bytes(self) -> int:
        return self._bytes

    def add(self, level: str, text: str) -> int:
        """Keep one line; the change in held bytes (negative when evictions
        freed more than the line takes)."""
        size = len(text.encode("utf-8", "replace")) + LINE_OVERHEAD
        before = self._bytes
        if size > self.max_bytes:  # one line bigger than the ring: keep its end
            text = text[-(self.max_bytes - LINE_OVERHEAD) // 4:]
            size = len(text.encode("utf-8", "replace")) + LINE_OVERHEAD
        self._lines.append((level, text, size))
        self._bytes += size
        while len(self._lines) > self.max_lines or self._bytes > self.max_bytes:
            _level, _text, freed = self._lines.popleft()
            self._bytes -= freed
            self.dropped += 1
        return self._bytes - before

    def lines(self) -> list[dict[str, str]]:
        return [{"level": level, "text": text} for level, text, _size in self._lines]
