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

    def watches_changing(self, table: FdTable) -> bool:
        """Whether any watched fd may become ready while the guest waits."""
        return any(target.can_change() for fd in self.interests
                   if (target := table.lookup(fd)) is not None)
