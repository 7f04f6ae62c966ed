"""The results file: one JSON line per finished input, appended as results arrive.

It doubles as the batch's journal. A line is written (and flushed) only when
its input is finished, so after a crash or Ctrl-C the file lists exactly the
inputs that need no redoing; `open_results` reads it back and repairs what an
abrupt stop can leave behind (half a last line).
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import IO, Any

from spearpy import _json
from spearpy._files import atomic_write
from spearpy.batch.jobs import BatchError, id_key


def _valid_lines(data: bytes) -> tuple[list[bytes], set[str], bool]:
    """The complete, parseable result lines, their id keys, and whether any
    line had to be dropped."""
    lines, keys, dropped = [], set(), False
    body, _, tail = data.rpartition(b"\n")
    if tail:
        dropped = True  # the writer died mid-line: that input is simply redone
    for raw in body.split(b"\n") if body else []:
        if not raw.strip():
            continue
        try:
            record = _json.loads(raw)
        except (UnicodeDecodeError, json.JSONDecodeError):
            dropped = True
            continue
        if not isinstance(record, dict) or "id" not in record:
            dropped = True
            continue
        lines.append(raw)
        keys.add(id_key(record["id"]))
    return lines, keys, dropped


class ResultsFile:
    """Append-only, thread-safe writer of result lines."""

    def __init__(self, path: Path, done: set[str], handle: IO[bytes]) -> None:
        self.path = path
        self.done = done  # id keys already in the file when it was opened
        self._handle = handle
        self._lock = threading.Lock()

    def write(self, record: dict[str, Any]) -> None:
        line = json.dumps(record, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"
        with self._lock:
            # One write() per line, flushed at once: a reader (or a resumed
            # batch) never sees a result that is only in a buffer.
            self._handle.write(line)
            self._handle.flush()

    def sync(self) -> None:
        """Make every line written so far survive a power cut, not only a crash."""
        with self._lock:
            try:
                os.fsync(self._handle.fileno())
            except OSError as exc:
                raise BatchError(f"cannot sync results {self.path}: "
                                 f"{exc.strerror or exc}") from exc

    def close(self) -> None:
        with self._lock:
            self._handle.close()

    def __enter__(self) -> ResultsFile:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()


def open_results(path: str | os.PathLike[str]) -> ResultsFile:
    """Open (or create) the results file for appending, after reading which
    inputs it already holds."""
    target = Path(path)
    try:
        data = target.read_bytes() if target.exists() else b""
    except OSError as exc:
        raise BatchError(f"cannot read results {target}: {exc.strerror or exc}") from exc
    lines, done, dropped = _valid_lines(data)
    try:
        if dropped:
            # Rewrite without the broken lines, atomically, so a second crash
            # during the repair cannot lose the good ones.
            atomic_write(target, b"".join(line + b"\n" for line in lines))
        if target.parent != Path(""):
            target.parent.mkdir(parents=True, exist_ok=True)
        handle = open(target, "ab")  # noqa: SIM115 - owned by ResultsFile
    except OSError as exc:
        raise BatchError(f"cannot write results {target}: {exc.strerror or exc}") from exc
    return ResultsFile(target, done, handle)
