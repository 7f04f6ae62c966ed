"""One guest instance's fd table: chat sessions, responses and epoll sets.

Numbers start at 1000 and are never reused within an instance; closed entries
are dropped (only their numbers are remembered) so a guest that opens and
closes forever does not grow the host's memory beyond one int per fd.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from spearpy import abi


class FdKind(Enum):
    CHAT_SESSION = "ChatSession"
    CHAT_RESPONSE = "ChatResponse"
    EPOLL = "Epoll"


@dataclass(slots=True)
class ChatResponse:
    body: bytes
    metrics: dict[str, Any]
    is_error: bool


@dataclass(slots=True)
class EpollSet:
    interests: dict[int, int] = field(default_factory=dict)  # fd -> event mask


@dataclass(slots=True)
class FdEntry:
    kind: FdKind
    obj: Any
    nonblock: bool = False


class FdTable:
    def __init__(self, max_open: int = abi.DEFAULT_MAX_OPEN_FDS) -> None:
        self._entries: dict[int, FdEntry] = {}
        self._next = abi.FIRST_FD
        self._max_open = max_open

    def __len__(self) -> int:
        return len(self._entries)

    def open(self, kind: FdKind, obj: object) -> int:
        if len(self._entries) >= self._max_open:
            return abi.EMFILE
        if self._next > 0x7FFFFFFF:
            return abi.EMFILE  # i32 fd space exhausted; numbers are never reused
        fd = self._next
        self._next += 1
        self._entries[fd] = FdEntry(kind, obj)
        return fd

    def entry(self, fd: int) -> FdEntry | None:
        return self._entries.get(fd)

    def get(self, fd: int, kind: FdKind) -> Any:
        entry = self._entries.get(fd)
        if entry is None or entry.kind is not kind:
            return None
        return entry.obj

    def close(self, fd: int, kind: FdKind | None = None) -> int:
        """0 on close or already closed; EBADF for a never-opened or wrong-kind fd."""
        entry = self._entries.get(fd)
        if entry is None:
            return 0 if abi.FIRST_FD <= fd < self._next else abi.EBADF
        if kind is not None and entry.kind is not kind:
            return abi.EBADF
        del self._entries[fd]
        for other in self._entries.values():
            if other.kind is FdKind.EPOLL:
                other.obj.interests.pop(fd, None)
        return 0

    def entries(self) -> list[tuple[int, FdEntry]]:
        return list(self._entries.items())

    def ready_events(self, fd: int) -> int:
        """Readiness of an fd: every send completes synchronously, so responses are
        always readable and sessions always writable."""
        entry = self._entries.get(fd)
        if entry is None:
            return abi.EPOLLHUP
        if entry.kind is FdKind.CHAT_RESPONSE:
            return abi.EPOLLIN | (abi.EPOLLERR if entry.obj.is_error else 0)
        if entry.kind is FdKind.CHAT_SESSION:
            return abi.EPOLLOUT
        return 0

    def status_json(self, fd: int) -> bytes:
        entry = self._entries[fd]
        mask = self.ready_events(fd)
        names = [n for bit, n in ((abi.EPOLLIN, "EPOLLIN"), (abi.EPOLLOUT, "EPOLLOUT"),
                                  (abi.EPOLLERR, "EPOLLERR"), (abi.EPOLLHUP, "EPOLLHUP"))
                 if mask & bit]
        return _compact({"kind": entry.kind.value, "flags": _flag_names(entry),
                         "poll_mask": names, "closed": False})


def _flag_names(entry: FdEntry) -> list[str]:
    return ["O_NONBLOCK"] if entry.nonblock else []


def flags_json(entry: FdEntry) -> bytes:
    return _compact({"flags": _flag_names(entry)})


def _compact(value: object) -> bytes:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()
