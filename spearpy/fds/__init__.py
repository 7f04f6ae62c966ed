"""A run's fds: the table, one module per kind, and the waker waits block on.

A new kind (user streams, mic, rtasr) is a subclass of `Fd` in a module of
its own that answers `readiness`, `can_change`, `close` and `metrics`; if it
is fed from another thread it holds a reference to the run's `Waker` and
calls `wake()` after each change. Nothing else needs to know it exists.
"""

from spearpy.fds.base import Fd
from spearpy.fds.chat import ChatResponse, ChatResponseFd, ChatSessionFd
from spearpy.fds.epoll import EpollFd
from spearpy.fds.table import FdTable
from spearpy.fds.waker import Waker

__all__ = ["ChatResponse", "ChatResponseFd", "ChatSessionFd", "EpollFd", "Fd", "FdTable",
           "Waker"]
