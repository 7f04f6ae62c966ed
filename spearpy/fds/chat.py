"""Chat fds: a session (always writable) and a send's response (readable once
its send ends; pending, so neither closable nor readable, until then)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from spearpy import abi
from spearpy.fds.base import Fd

if TYPE_CHECKING:
    from spearpy.chat.session import ChatSession


@dataclass(slots=True)
class ChatResponse:
    body: bytes
    metrics: dict[str, Any]
    is_error: bool


class ChatSessionFd(Fd):
    kind = "ChatSession"
    # An empty ChatSession (its registry, params, messages) with its fd; what
    # it is given later is charged as it comes.
    host_bytes = 1280
    __slots__ = ("session",)

    def __init__(self, session: ChatSession) -> None:
        super().__init__()
        self.session = session

    def readiness(self) -> int:
        return abi.EPOLLOUT

    def metrics(self) -> dict[str, Any]:
        return self.session.last_metrics  # the session's last send


class ChatResponseFd(Fd):
    """A send takes its response fd before it runs (a full table is refused
    before anything goes upstream) and fills it when it ends. Until then the
    number is predictable and a tool inside the send may try anything on it."""

    kind = "ChatResponse"
    host_bytes = 512  # with its ChatResponse and metrics dict
    __slots__ = ("response",)

    def __init__(self, response: ChatResponse | None = None) -> None:
        super().__init__()
        self.response = response

    @property
    def pending(self) -> bool:
        return self.response is None

    def fill(self, response: ChatResponse) -> None:
        self.response = response

    def held_bytes(self) -> int:
        # cchat_send charges the body when it fills the fd: the body is
        # freed with the fd, its copy in the session is charged apart.
        response = self.response
        return self.host_bytes + (len(response.body) if response is not None else 0)

    def readiness(self) -> int:
        response = self.response
        if response is None:
            return 0  # its send has not produced it yet
        return abi.EPOLLIN | (abi.EPOLLERR if response.is_error else 0)

    def metrics(self) -> dict[str, Any] | int:
        return abi.EAGAIN if self.response is None else self.response.metrics
