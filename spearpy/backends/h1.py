"""A lean HTTP/1.1 client for one origin: the backends' hot POST (wire.py).

One preformatted head plus the payload in one `sendall`, the answer usually
whole after one `recv`, plain TCP sockets blocking with their timeout in the
kernel: three socket calls a request where httpx's transport makes about
twelve, each a GIL hand-off (docs/backends.md "How a request is sent").
Errors are httpx's exception types, so retries and error codes are the same
on either path. This module holds the sockets and the pool; reading an answer
off one is h1_response.py.
"""

from __future__ import annotations

import contextlib
import os
import select
import socket
import ssl
import struct
import threading
import time
import weakref

import httpx

from spearpy.backends.h1_response import ACCEPT_ENCODING, Response

# wire.py takes ACCEPT_ENCODING from here, beside the Pool it posts through.
__all__ = ["ACCEPT_ENCODING", "Connection", "Pool", "Response"]

# httpx's default keepalive_expiry: an idle connection older than this is
# closed rather than risked (servers time idle connections out).
_KEEPALIVE_S = 5.0


class Connection:
    """One keep-alive socket. A plain TCP socket is blocking, with its
    timeout in the kernel (SO_RCVTIMEO / SO_SNDTIMEO): Python's own socket
    timeout polls before every send and recv, two system calls and two GIL
    hand-offs where one does. A timeout then surfaces as BlockingIOError
    (EAGAIN). TLS keeps Python's timeout (OpenSSL would turn EAGAIN into a
    want-read error) and costs the extra poll, which a remote API's latency
    dwarfs."""

    __slots__ = ("idle_since", "kernel_timeouts", "sock", "timeout")

    def __init__(self, sock: socket.socket, timeout: float) -> None:
        self.sock = sock
        self.timeout = -1.0
        self.idle_since = 0.0
        self.kernel_timeouts = not isinstance(sock, ssl.SSLSocket)
        if self.kernel_timeouts:
            sock.settimeout(None)
        self.set_timeout(timeout)

    def set_timeout(self, timeout: float) -> None:
        if timeout == self.timeout:
            return
        self.timeout = timeout
        if self.kernel_timeouts:
            # A zero timeval means no timeout at all: never send one (and
            # ~3 years is as good as forever).
            micros = max(1, round(min(timeout, 1e8) * 1e6))
            value = struct.pack("@ll", micros // 1_000_000, micros % 1_000_000)
            try:
                self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, value)
                self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, value)
                return
            except OSError:
                self.kernel_timeouts = False  # Python's timeout, then
        self.sock.settimeout(timeout)

    def usable(self, now: float) -> bool:
        """Not expired, and nothing to read: a closed connection reads as EOF."""
        if now - self.idle_since > _KEEPALIVE_S:
            return False
        if isinstance(self.sock, ssl.SSLSocket) and self.sock.pending():
            return False  # bytes nobody asked for
        try:
            return not _readable(self.sock)
        except (OSError, ValueError):
            return False

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()


def _readable(sock: socket.socket) -> bool:
    if not hasattr(select, "poll"):  # Windows
        return bool(select.select([sock], [], [], 0)[0])
    # poll, not select: select refuses descriptors past 1023, which a busy
    # server process reaches.
    poller = select.poll()
    poller.register(sock, select.POLLIN)
    return bool(poller.poll(0))


class Pool:
    """Keep-alive connections to one origin, at most `limit` at a time."""

    def __init__(self, url: httpx.URL, limit: int) -> None:
        self._https = url.scheme == "https"
        self._host = url.raw_host.decode("ascii")
        self._port = url.port or (443 if self._https else 80)
        self._limit = limit
        self._slots = threading.BoundedSemaphore(limit)
        self._idle: list[Connection] = []
        self._ssl: ssl.SSLContext | None = None
        self._closed = False
        _POOLS.add(self)

    def forget(self) -> None:
        """In a forked child: the connections are the parent's (two processes
        writing requests on one socket would mix them up), and so are the
        slots that the parent's other threads held."""
        idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()  # the child's copy of the descriptor only
        self._slots = threading.BoundedSemaphore(self._limit)

    def post(self, head: bytes, payload: bytes, timeout: float) -> Response:
        if not self._slots.acquire(timeout=timeout):
            raise httpx.PoolTimeout("no connection of the pool came free in time")
        try:
            conn = self._connection(timeout)
        except BaseException:
            self._slots.release()
            raise
        try:
            conn.sock.sendall(head + payload)  # one buffer: one syscall, one GIL hand-off
        except (TimeoutError, BlockingIOError) as exc:  # BlockingIOError: the kernel's timeout
            self.release(conn, reusable=False)
            raise httpx.WriteTimeout(str(exc) or "write timed out") from exc
        except OSError as exc:
            # A server may answer and close before reading the whole body (a
            # 413): its answer says more than the broken pipe, and httpcore
            # read it too. The response gives the slot back either way.
            try:
                response = Response(self, conn)
            except httpx.HTTPError:
                raise httpx.WriteError(str(exc) or type(exc).__name__) from exc
            response.keep_alive = False
            return response
        except BaseException:
            self.release(conn, reusable=False)
            raise
        return Response(self, conn)  # from here on, its close() gives the slot back

    def _connection(self, timeout: float) -> Connection:
        idle = self._idle
        while idle:
            try:
                conn = idle.pop()
            except IndexError:  # another thread took the last one
                break
            if conn.usable(time.monotonic()):
                conn.set_timeout(timeout)
                return conn
            conn.close()
        return self._connect(timeout)

    def _connect(self, timeout: float) -> Connection:
        try:
            sock = socket.create_connection((self._host, self._port), timeout=timeout)
        except TimeoutError as exc:
            raise httpx.ConnectTimeout(str(exc) or "connect timed out") from exc
        except OSError as exc:
            raise httpx.ConnectError(str(exc) or type(exc).__name__) from exc
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self._https:
                sock = self._tls().wrap_socket(sock, server_hostname=self._host)
        except TimeoutError as exc:
            sock.close()
            raise httpx.ConnectTimeout(str(exc) or "TLS handshake timed out") from exc
        except OSError as exc:  # ssl.SSLError included
            sock.close()
            raise httpx.ConnectError(str(exc) or type(exc).__name__) from exc
        try:
            return Connection(sock, timeout)
        except OSError as exc:
            sock.close()
            raise httpx.ConnectError(str(exc) or type(exc).__name__) from exc

    def _tls(self) -> ssl.SSLContext:
        if self._ssl is None:
            # httpx's own: certifi, or SSL_CERT_FILE / SSL_CERT_DIR, as its transport did.
            context = httpx.create_ssl_context()
            context.set_alpn_protocols(["http/1.1"])
            self._ssl = context
        return self._ssl

    def release(self, conn: Connection, reusable: bool) -> None:
        if reusable and not self._closed:
            conn.idle_since = time.monotonic()
            self._idle.append(conn)
        else:
            conn.close()
        self._slots.release()

    def close(self) -> None:
        self._closed = True
        idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()


_POOLS: weakref.WeakSet[Pool] = weakref.WeakSet()


def _forget_after_fork() -> None:
    for pool in list(_POOLS):
        pool.forget()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_after_fork)
