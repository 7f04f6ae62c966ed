"""What every fd of a run's table is: a small object that says its readiness,
its metrics and whether it may close now. The table and epoll ask these
questions and never look at which kind answers them."""

from __future__ import annotations

from typing import Any, ClassVar

from spearpy import abi


class Fd:
    kind: ClassVar[str] = ""  # what spear_fd_ctl GET_KIND reports
    # What an open fd of this kind costs the host at least (the object, its
    # empty containers, the table's slot; measured with tracemalloc), charged
    # against max_host_bytes while it is open: without it a guest churning
    # objects that hold nothing looks free.
    host_bytes: ClassVar[int] = 256
    __slots__ = ("nonblock",)

    def __init__(self) -> None:
        self.nonblock = False

    def readiness(self) -> int:
        """The EPOLL* bits true now."""
        return 0

    def can_change(self) -> bool:
        """Whether readiness may change while the guest waits (an fd fed from
        another thread): only then is an infinite epoll wait worth blocking."""
        return False

    @property
    def pending(self) -> bool:
        """Reserved for what a running send will produce: not usable yet."""
        return False

    def close(self) -> int:
        """0 to let the table drop it, or the errno that refuses the close."""
        return abi.EAGAIN if self.pending else 0

    def metrics(self) -> dict[str, Any] | int:
        """GET_METRICS JSON, or the errno that refuses it."""
        return abi.EAGAIN if self.pending else {}

    def held_bytes(self) -> int:
        """What closing this fd gives back to the run's max_host_bytes: its
        fixed cost and whatever else was charged for what it alone holds."""
        return self.host_bytes

    def close_summary(self) -> dict[str, Any] | None:
        """What an `audio_close` event says of this fd once it is closed (a
        device fed from another thread: its counts and last error), or None:
        no event."""
        return None

    def flags(self) -> list[str]:
        return ["O_NONBLOCK"] if self.nonblock else []
