"""Wire-level misbehaviour: answers a well-behaved HTTP server would never give.

Each fault is a function that takes over the raw connection socket and
leaves it unusable; the server closes the connection afterwards. The hostile
upstream suite adds its faults to `WIRE_FAULTS`. ("garbage" is not here: it is
a well-framed response with a bad body, so it is rendered like any reply.)
"""

from __future__ import annotations

import contextlib
import socket
import struct
from collections.abc import Callable, Iterable
from http import HTTPStatus
from typing import TypeAlias

FaultWriter: TypeAlias = Callable[[socket.socket, int, "Iterable[tuple[str, str]]", bytes], None]


def encode_head(status: int, headers: Iterable[tuple[str, str]]) -> bytes:
    try:
        phrase = HTTPStatus(status).phrase
    except ValueError:
        phrase = "Scripted"
    lines = [f"HTTP/1.1 {status} {phrase}", *(f"{k}: {v}" for k, v in headers), "", ""]
    return "\r\n".join(lines).encode("latin-1")


def reset(
    sock: socket.socket, status: int, headers: Iterable[tuple[str, str]], body: bytes
) -> None:
    """Drop the connection without a response; SO_LINGER 0 turns close() into a TCP RST."""
    del status, headers, body
    with contextlib.suppress(OSError):  # peer already gone: nothing left to reset
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


def truncate(
    sock: socket.socket, status: int, headers: Iterable[tuple[str, str]], body: bytes
) -> None:
    """Promise the whole body in Content-Length, send half of it, then close."""
    declared = max(len(body), 16)
    sent = body[: len(body) // 2]
    head = encode_head(status, [*headers, ("Content-Length", str(declared))])
    try:
        sock.sendall(head + sent)
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass  # the client left first; the fault happened anyway
    sock.close()


WIRE_FAULTS: dict[str, FaultWriter] = {"reset": reset, "truncate": truncate}
