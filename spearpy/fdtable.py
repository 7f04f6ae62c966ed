"""One guest instance's fd table: chat sessions, responses and epoll sets.

Numbers start at 1000 and are never reused within an instance; closed entries
are dropped (only their numbers are remembered) so a guest that opens and
closes forever does not grow the host's memory beyond one int per fd.

A send takes its response fd before it runs (so a full table is refused
before anything goes upstream) and fills it when it ends. Until then the
entry is *pending*: the number is predictable, and a tool running inside the
send may try anything on it, so a pending entry refuses `close` (EAGAIN, as a
session refuses it while its send runs), has no body or metrics yet (EAGAIN)
and is not ready for epoll.
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
    pending: bool = False  # reserved by a send still running; obj is None until fill()


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

    def reserve(self, kind: FdKind) -> int:
        """A pending fd of `kind` (or EMFILE), for an object that needs its own
        number or that a running send will produce; `fill` completes it."""
        fd = self.open(kind, None)
        if fd >= 0:
            self._entries[fd].pending = True
        return fd

    def fill(self, fd: int, kind: FdKind, obj: object) -> None:
        """Complete a reserved fd. A pending entry cannot be closed, so it is
        still there; should it not be, it is put back rather than lose `obj`."""
        entry = self._entries.get(fd)
        if entry is None or entry.kind is not kind:
            self._entries[fd] = FdEntry(kind, obj)
            return
        entry.obj = obj
        entry.pending = False

    def release(self, fd: int) -> None:
        """Drop a reservation whose object will never come (the send failed
        inside the host); the number stays used, like any closed fd."""
        entry = self._entries.get(fd)
        if entry is not None and entry.pending:
            del self._entries[fd]

    def entry(self, fd: int) -> FdEntry | None:
        return self._entries.get(fd)

    def get(self, fd: int, kind: FdKind) -> Any:
        """The object of a complete fd of `kind`; None otherwise (pending too:
        callers that must tell a pending fd apart use `entry`)."""
        entry = self._entries.get(fd)
        if entry is None or entry.kind is not kind:
            return None
        return entry.obj

    def close(self, fd: int, kind: FdKind | None = None) -> int:
        """0 on close or already closed; EBADF for a never-opened or wrong-kind
        fd; EAGAIN for a pending one (its send would lose what it produces)."""
        entry = self._entries.get(fd)
        if entry is None:
            return 0 if abi.FIRST_FD <= fd < self._next else abi.EBADF
        if kind is not None and entry.kind is not kind:
            return abi.EBADF
        if entry.pending:
            return abi.EAGAIN
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
        if entry.pending:
            return 0  # its send has not produced it yet
        if entry.kind is FdKind.CHAT_RESPONSE:
            return abi.EPOLLIN | (abi.EPOLLERR if entry.obj.is_error else 0)
        if entry.kind is FdKind.CHAT_SESSION:
            return abi.EPOLLOUT
        return 0

    def status_json(self, fd: int, entry: FdEntry) -> bytes:
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
