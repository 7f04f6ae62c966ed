"""One guest instance's fd table.

Numbers start at 1000 and are never reused within an instance; closed
entries are dropped (only their numbers are remembered) so a guest that
opens and closes forever does not grow the host's memory beyond one int per
fd. The table holds `Fd` objects and asks them, never their kind, what they
allow.

Every open fd is charged to the run's host budget (`HostBudget`, the
RunContext) at its kind's fixed cost when it opens, and what it holds is given
back when it closes: so a guest that churns fds pays for the ones it keeps
open and nothing for the ones it closed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, TypeVar

from spearpy import _json, abi
from spearpy.fds.base import Fd

F = TypeVar("F", bound=Fd)
_NAMES = ((abi.EPOLLIN, "EPOLLIN"), (abi.EPOLLOUT, "EPOLLOUT"), (abi.EPOLLERR, "EPOLLERR"),
          (abi.EPOLLHUP, "EPOLLHUP"))


class HostBudget(Protocol):
    """The run's max_host_bytes account (its RunContext)."""

    def charge(self, nbytes: int, what: str) -> None: ...

    def release(self, nbytes: int) -> None: ...


class FdTable:
    def __init__(self, max_open: int = abi.DEFAULT_MAX_OPEN_FDS,
                 budget: HostBudget | None = None) -> None:
        self._entries: dict[int, Fd] = {}
        self._next = abi.FIRST_FD
        self._max_open = max_open
        self._budget = budget

    def __len__(self) -> int:
        return len(self._entries)

    def open(self, make: Fd | Callable[[int], Fd]) -> int:
        """The new fd's number, or EMFILE. `make` may be the object or a
        function of the number (an object that must know its own fd)."""
        if len(self._entries) >= self._max_open or self._next > 0x7FFFFFFF:
            return abi.EMFILE  # full, or the i32 fd space is exhausted
        fd = self._next
        self._next += 1
        entry = self._entries[fd] = make(fd) if callable(make) else make
        if self._budget is not None:
            # In the table first: a charge past the budget ends the run, whose
            # end closes every fd of the table (a queue or worker included).
            self._budget.charge(entry.held_bytes(), f"an open {entry.kind} fd")
        return fd

    def lookup(self, fd: int) -> Fd | None:
        return self._entries.get(fd)

    def get(self, fd: int, kind: type[F]) -> F | None:
        """The fd if it is open and a `kind`; None otherwise."""
        entry = self._entries.get(fd)
        return entry if isinstance(entry, kind) else None

    def close(self, fd: int) -> int:
        """0 on close or already closed; EBADF for a never-opened fd; the
        object's own refusal otherwise (a pending response: EAGAIN)."""
        entry = self._entries.get(fd)
        if entry is None:
            return 0 if abi.FIRST_FD <= fd < self._next else abi.EBADF
        refused = entry.close()
        if refused:
            return refused
        del self._entries[fd]
        self._release(entry)
        return 0

    def discard(self, fd: int) -> None:
        """Drop an entry whatever it says (a reservation whose send failed
        inside the host); the number stays used, like any closed fd."""
        entry = self._entries.pop(fd, None)
        if entry is not None:
            self._release(entry)

    def _release(self, entry: Fd) -> None:
        if self._budget is not None:
            self._budget.release(entry.held_bytes())

    def entries(self) -> list[tuple[int, Fd]]:
        return list(self._entries.items())

    def readiness(self, fd: int) -> int:
        entry = self._entries.get(fd)
        return abi.EPOLLHUP if entry is None else entry.readiness()

    def status_json(self, fd: int) -> bytes:
        entry = self._entries[fd]
        mask = entry.readiness()
        return _json.compact_bytes({"kind": entry.kind, "flags": entry.flags(),
                         "poll_mask": [name for bit, name in _NAMES if mask & bit],
                         "closed": False})


