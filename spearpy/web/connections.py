"""How many connections an HTTP surface (`spearpy serve`, `spearpy mcp serve
--http`) holds, and for how long one may take to say what it wants:
uvicorn's h11 protocol with two bounds it lacks.

uvicorn times a connection out only between requests (keep-alive). One that
connects and never sends a request head, or trickles it a byte at a time,
holds a file descriptor for good; a client that opens thousands of them, a
token or not (the token is checked once the head is read), takes the
descriptors the runs need: SQLite, the guests' output pipes, worker pipes.
Here each head must arrive within `head_timeout` seconds of the connection
or of the previous response, and past `max_connections` a new connection is
closed as soon as it is accepted. A proxy in front does the same for
services that have one; `spearpy serve` must be safe without.
"""

from __future__ import annotations

import asyncio
import resource
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

# The descriptors a service keeps for connections: half its limit, the rest
# left to runs (a run's scratch files, output pipes and upstream sockets).
_CONNECTION_SHARE = 2


def default_max_connections() -> int:
    """Half the process's descriptor limit, at least 64."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return 32768
    return max(64, soft // _CONNECTION_SHARE)


def raise_fd_limit() -> int:
    """Lift the soft descriptor limit to the hard one (the soft default, 1024
    on most Linux systems, is what select() needed, not what a server can
    use) and return it. For `spearpy serve` only: a library must not change
    its embedder's process limits."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != soft:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError):
            pass  # not allowed here (a container's seccomp, a cap on hard): keep the soft one
    return soft


def bounded_h11(max_connections: int, head_timeout: float) -> type[H11Protocol]:
    """uvicorn's h11 protocol class with these bounds (uvicorn.Config(http=...))."""

    class _BoundedH11(H11Protocol):
        _head_timer: asyncio.TimerHandle | None = None

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            if len(self.connections) >= max_connections:
                # Before uvicorn counts it, parses it or logs it: the cheapest
                # way to give the descriptor back.
                transport.abort()
                return
            super().connection_made(transport)
            self._await_head()

        def connection_lost(self, exc: Exception | None) -> None:
            self._stop_head_timer()
            if self.transport is None:  # refused in connection_made
                return
            super().connection_lost(exc)

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            if self.conn.their_state is not h11.IDLE:
                self._stop_head_timer()  # a request (or an upgrade) has begun

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self.transport.is_closing() and self.conn.their_state is h11.IDLE:
                self._await_head()

        def _await_head(self) -> None:
            self._stop_head_timer()
            self._head_timer = self.loop.call_later(head_timeout, self._head_late)

        def _stop_head_timer(self) -> None:
            if self._head_timer is not None:
                self._head_timer.cancel()
                self._head_timer = None

        def _head_late(self) -> None:
            self._head_timer = None
            # Upgraded to a WebSocket, the transport is another protocol's now.
            if (not self.transport.is_closing() and self.transport.get_protocol() is self
                    and self.conn.their_state is h11.IDLE):
                self.transport.close()

    return _BoundedH11


def connection_options(max_connections: int | None, head_timeout: float) -> dict[str, Any]:
    """uvicorn.Config options for these bounds (max_connections None: the default)."""
    # asyncio accepts up to `backlog` connections per wake-up before the
    # protocol sees any; uvicorn's 2048 let one burst take that many
    # descriptors past max_connections.
    return {"http": bounded_h11(max_connections or default_max_connections(), head_timeout),
            "backlog": 128}
