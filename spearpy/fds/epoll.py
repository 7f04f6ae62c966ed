"""An epoll set: interests by fd, readiness asked of each fd object.

A closed fd leaves every set it was in (as on Linux); the set notices when
it next looks, so closing an fd never has to find the sets that watch it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from spearpy import abi
from spearpy.fds.base import Fd

if TYPE_CHECKING:
    from spearpy.fds.table import FdTable

VALID_EVENTS = abi.EPOLLIN | abi.EPOLLOUT | abi.EPOLLERR | abi.EPOLLHUP


class EpollFd(Fd):
    kind = "Epoll"
    __slots__ = ("interests",)

    def __init__(self) -> None:
        super().__init__()
        self.interests: dict[int, int] = {}  # fd -> event mask

    def ready(self, table: FdTable) -> list[tuple[int, int]]:
        """(fd, events) of every ready interest, in fd order; ERR and HUP are
        always reported, as with Linux epoll."""
        found = []
        for fd in sorted(self.interests):
            target = table.lookup(fd)
            if target is None:
                del self.interests[fd]
                continue
            mask = target.readiness() & (self.interests[fd] | abi.EPOLLERR | abi.EPOLLHUP)
            if mask:
                found.append((fd, mask))
        return found

    def watch(self, table: FdTable, fd: int, events: int) -> None:
        """Add or change an interest. Closed fds leave lazily, when the set
        next looks; a guest that adds and closes fds without ever waiting
        would grow the set forever, so an add that finds it holding more
        interests than the table has open fds drops the closed ones first:
        the set stays within twice the open fds (max_open_fds)."""
        interests = self.interests
        if fd not in interests and len(interests) >= len(table):
            for stale in [f for f in interests if table.lookup(f) is None]:
                del interests[stale]
        interests[fd] = events & VALID_EVENTS

    def watches_changing(self, table: FdTable) -> bool:
        """Whether any watched fd may become ready while the guest waits."""
        return any(target.can_change() for fd in self.interests
                   if (target := table.lookup(fd)) is not None)
