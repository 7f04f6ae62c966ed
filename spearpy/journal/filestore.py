"""The file store: one JSON Lines file per journal, `<directory>/<id>.jsonl`.

Appends go through O_APPEND, one record a line, written whole or not at all
(a failed write is cut back off). The writer holds an flock on the file. On
open for append and on read, a torn tail (the bytes after the last newline:
a line a crash cut short, or the zeros a power cut can leave) is dropped; a
damaged complete line is an error naming it, never skipped.
"""

from __future__ import annotations

import io
import os
from collections.abc import Iterator
from pathlib import Path

from spearpy.journal._lock import lock_fd
from spearpy.journal._sync import BackgroundSync
from spearpy.journal.errors import JournalCorrupt, JournalError
from spearpy.journal.records import END, Record, decode
from spearpy.journal.store import (
    DEFAULT_MAX_JOURNAL_BYTES,
    JournalInfo,
    JournalStore,
    StoreWriter,
    SyncPolicy,
    check_id,
)

SUFFIX = ".jsonl"
_CHUNK = 1 << 20
_END_RECORD_MAX = 512  # an end record is far shorter; list() reads this much of a tail


class FileJournalStore(JournalStore):
    def __init__(self, directory: str | os.PathLike[str], *,
                 max_record_bytes: int = DEFAULT_MAX_JOURNAL_BYTES) -> None:
        super().__init__(max_record_bytes=max_record_bytes)
        self.directory = Path(directory)

    @classmethod
    def for_path(cls, path: str | os.PathLike[str]) -> tuple[FileJournalStore, str]:
        """The store and id of the journal file `path` (named `<id>.jsonl`)."""
        target = Path(path)
        if not target.name.endswith(SUFFIX):
            raise JournalError(f"a journal file's name ends in {SUFFIX}: {str(target)!r}")
        return cls(target.parent), check_id(target.name[:-len(SUFFIX)])

    def path_of(self, journal_id: str) -> Path:
        return self.directory / f"{check_id(journal_id)}{SUFFIX}"

    def open_writer(self, journal_id: str, *, sync: SyncPolicy = SyncPolicy.SEND,
                    validate: bool = True) -> StoreWriter:
        path = self.path_of(journal_id)
        try:
            self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
            fd, created = _open_append(path)
        except OSError as exc:
            raise JournalError(f"cannot open journal {str(path)!r}: {exc.strerror}") from exc
        try:
            lock_fd(fd, f"journal {str(path)!r}")
            if created and sync is not SyncPolicy.NONE:
                _sync_dir(self.directory)  # the new file's name survives a power cut too
            return self._repaired_writer(journal_id, path, fd, sync, validate)
        except BaseException:
            os.close(fd)
            raise

    def _repaired_writer(self, journal_id: str, path: Path, fd: int,
                         sync: SyncPolicy, validate: bool) -> _FileWriter:
        """Validate every complete line (an error names a damaged one), then
        cut a torn tail off so the next record starts a line of its own.
        Not validating, the lines are counted, and only the last decoded
        (is it the end?): the caller reads them all before appending."""
        count, ended = 0, False
        if validate:
            for record in self.records(journal_id):
                count, ended = count + 1, record.kind == END
        try:
            size = os.fstat(fd).st_size
            good = _complete_length(fd, size)
            if not validate:
                count, ended = _count_lines(fd, good), _ends_with_end(path)
            if good != size:
                os.ftruncate(fd, good)
                os.fsync(fd)
        except OSError as exc:
            raise JournalError(f"cannot repair journal {str(path)!r}: {exc.strerror}") from exc
        return _FileWriter(journal_id, path, fd, sync, count, good, ended)

    def list(self) -> list[JournalInfo]:
        if not self.directory.is_dir():
            return []
        found = []
        for path in sorted(self.directory.glob(f"*{SUFFIX}")):
            journal_id = path.name[:-len(SUFFIX)]
            try:
                check_id(journal_id)
            except JournalError:
                continue  # not a name this store writes
            found.append(JournalInfo(journal_id, _ends_with_end(path)))
        return found

    def info(self, journal_id: str) -> JournalInfo | None:
        path = self.path_of(journal_id)
        return JournalInfo(journal_id, _ends_with_end(path)) if path.is_file() else None

    def last_record(self, journal_id: str) -> Record | None:
        path = self.path_of(journal_id)
        try:
            with open(path, "rb", buffering=0) as handle:
                fd = handle.fileno()
                end = _complete_length(fd, os.fstat(fd).st_size)
                if not end:
                    return None
                start = _line_start(fd, end - 1, self.max_record_bytes, path)
                line = os.pread(fd, end - 1 - start, start)
        except FileNotFoundError:
            raise JournalError(f"no journal {str(path)!r}") from None
        except OSError as exc:
            raise JournalError(f"cannot read journal {str(path)!r}: {exc.strerror}") from exc
        return self._decoded(journal_id, "its last line", line)

    def _lines(self, journal_id: str, after: int = -1) -> Iterator[tuple[str, bytes]]:
        path = self.path_of(journal_id)
        try:
            handle = open(path, "rb", buffering=0)  # noqa: SIM115 - closed below, generator
        except FileNotFoundError:
            raise JournalError(f"no journal {str(path)!r}") from None
        except OSError as exc:
            raise JournalError(f"cannot read journal {str(path)!r}: {exc.strerror}") from exc
        with handle:
            # Line n holds step n - 1: a page after `after` skips as many
            # lines, found but not decoded.
            for number, line in enumerate(
                    _complete_lines(handle, self.max_record_bytes, path), start=1):
                if number > after + 1:
                    yield f"line {number}", line


class _FileWriter(StoreWriter):
    def __init__(self, journal_id: str, path: Path, fd: int, sync: SyncPolicy, count: int,
                 size: int, ended: bool) -> None:
        super().__init__(journal_id, count, size, ended)
        self._path = path
        self._fd: int | None = fd
        self._sync = sync
        self._syncer: BackgroundSync | None = None

    def append(self, seq: int, kind: str, line: bytes) -> None:
        self._write(line + b"\n", seq, kind == END)

    def append_many(self, records: list[tuple[int, str, bytes]]) -> None:
        if records:
            self._write(b"".join([line + b"\n" for _, _, line in records]), records[-1][0],
                        records[-1][1] == END)

    def _write(self, lines: bytes, last_seq: int, ends: bool) -> None:
        """Lines whole or none of them: a failed write is cut back off."""
        fd = self._open_fd()
        data = memoryview(lines)
        before = self.bytes_used
        try:
            while data:
                data = data[os.write(fd, data):]
            if self._sync is SyncPolicy.EVERY:
                os.fdatasync(fd)
        except OSError as exc:
            # Half a line followed by the next record would be a damaged middle.
            try:
                os.ftruncate(fd, before)
            except OSError:
                self.close()  # the file cannot be made whole: no more appends
            raise JournalError(f"cannot append to journal {str(self._path)!r}: "
                               f"{exc.strerror}") from exc
        self.bytes_used = before + len(lines)
        self.next_seq = last_seq + 1
        self.ended = self.ended or ends

    def sync(self) -> None:
        if self._sync is SyncPolicy.SEND:
            self.sync_wait()
            try:
                os.fdatasync(self._open_fd())
            except OSError as exc:
                raise JournalError(f"cannot sync journal {str(self._path)!r}: "
                                   f"{exc.strerror}") from exc

    def sync_begin(self) -> None:
        if self._sync is SyncPolicy.SEND:
            if self._syncer is None:
                self._syncer = BackgroundSync(self._open_fd(), str(self._path))
            self._syncer.begin()

    def sync_wait(self) -> None:
        if self._syncer is not None:
            self._syncer.wait()

    def close(self) -> None:
        syncer, self._syncer = self._syncer, None
        try:
            if syncer is not None:
                syncer.stop()  # its last sync done before the fd closes
        finally:
            fd, self._fd = self._fd, None
            if fd is not None:
                os.close(fd)  # releases the flock

    def _open_fd(self) -> int:
        if self._fd is None:
            raise JournalError(f"journal {str(self._path)!r} is closed")
        return self._fd


def _open_append(path: Path) -> tuple[int, bool]:
    flags = os.O_RDWR | os.O_APPEND | os.O_CLOEXEC
    while True:
        try:
            return os.open(path, flags), False
        except FileNotFoundError:
            pass
        try:
            # 0600: a journal holds the run's conversation
            return os.open(path, flags | os.O_CREAT | os.O_EXCL, 0o600), True
        except FileExistsError:
            continue  # created meanwhile: open that one


def _count_lines(fd: int, length: int) -> int:
    """The newlines in the file's first `length` bytes."""
    count, offset = 0, 0
    while offset < length:
        chunk = os.pread(fd, min(_CHUNK, length - offset), offset)
        if not chunk:
            break
        count += chunk.count(b"\n")
        offset += len(chunk)
    return count


def _sync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _complete_length(fd: int, size: int) -> int:
    """The length of the file up to and including its last newline."""
    end = size
    while end > 0:
        start = max(0, end - _CHUNK)
        chunk = os.pread(fd, end - start, start)
        newline = chunk.rfind(b"\n")
        if newline >= 0:
            return start + newline + 1
        end = start
    return 0


def _line_start(fd: int, newline: int, limit: int, path: Path) -> int:
    """Where the line ending at offset `newline` starts."""
    end = newline
    while end > 0:
        start = max(0, end - _CHUNK)
        found = os.pread(fd, end - start, start).rfind(b"\n")
        if found >= 0:
            return start + found + 1
        if newline - start > limit:
            raise JournalCorrupt(f"journal {str(path)!r}'s last line is longer than a record "
                                 f"may be ({limit} bytes)")
        end = start
    return 0


def _complete_lines(handle: io.FileIO, limit: int, path: Path) -> Iterator[bytes]:
    """Each newline-ended line, a chunk at a time; the unended rest (a torn
    tail) is not given. A line longer than `limit` is damage."""
    read = handle.read
    pending = bytearray()
    number = 0
    while chunk := read(_CHUNK):
        start = 0
        while (newline := chunk.find(b"\n", start)) >= 0:
            number += 1
            if pending:
                pending += chunk[start:newline]
                line = bytes(pending)
                pending.clear()
            else:
                line = chunk[start:newline]
            if len(line) > limit:
                raise _too_long(path, number, limit)
            yield line
            start = newline + 1
        pending += chunk[start:]
        if len(pending) > limit:
            raise _too_long(path, number + 1, limit)


def _too_long(path: Path, number: int, limit: int) -> JournalCorrupt:
    return JournalCorrupt(f"journal {str(path)!r} line {number} is longer than a record "
                          f"may be ({limit} bytes)")


def _ends_with_end(path: Path) -> bool:
    try:
        with open(path, "rb") as handle:
            size = handle.seek(0, os.SEEK_END)
            handle.seek(max(0, size - _END_RECORD_MAX))
            tail = handle.read()
    except OSError:
        return False
    lines = tail[:tail.rfind(b"\n") + 1].split(b"\n")  # [..., last complete line, b""]
    if len(lines) < 2 or (len(lines) == 2 and size > len(tail)):
        return False  # no complete line, or one begun before the window: no end record
    last = lines[-2]
    try:
        return decode(last).kind == END
    except JournalCorrupt:
        return False
