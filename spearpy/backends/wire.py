"""One upstream endpoint: the backends' POSTs over a lean HTTP/1.1 pool (h1.py).

A backend posts JSON to one fixed URL with fixed headers and reads one
answer. Per loopback exchange of prepared bytes, `httpx.Client.stream` cost
~550 us of client CPU and httpx's transport alone (httpcore + h11) ~390 us:
an h11 state machine per event, header validation, pool bookkeeping with
locks, events and context managers, and a poll before every socket call
(about twelve socket calls a request). With many guests in one process that
CPU and every GIL hand-off (each socket call is one) lengthen every other
guest's wait (P4). Here the request is one preformatted head plus the
payload in one `sendall`, and the answer is usually whole after one `recv`:
~55 us, three socket calls (the reuse check, the send, the receive).

What stays the same: the headers httpx's Client sent (its User-Agent,
Accept-Encoding, keep-alive, under the backend's own), gzip and deflate
answers decoded, chunked answers, TLS with httpx's own context (certifi, or
SSL_CERT_FILE / SSL_CERT_DIR), a pool of at most `max_connections`, idle
connections closed after 5 s and checked before reuse, the timeout bounding
the connect, each write, each read and the wait for a pooled connection, an
answer read even when the server stopped reading the body (a 413), and
httpx's exceptions (ConnectError, ReadTimeout, RemoteProtocolError, ...) for
everything that goes wrong, so retries and error codes are unchanged. No
cookie a server sets is sent back (an OpenAI-compatible API keeps no state in
cookies), and no proxy from the environment is used (it would see the key).

A `wrap_transport` (record, replay) or a caller's own `httpx.Client` takes the
httpx path instead, with everything it does; so does a URL this client does
not speak (credentials in it, a scheme other than http and https).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Protocol

import httpx

from spearpy.backends.h1 import ACCEPT_ENCODING, Pool

TransportWrapper = Callable[[httpx.BaseTransport], httpx.BaseTransport]
# What the Client sent.
_USER_AGENT = f"python-httpx/{httpx.__version__}"


class WireResponse(Protocol):
    """What the backends read of an answer: an httpx.Response, or an h1.Response."""

    @property
    def status_code(self) -> int: ...

    @property
    def headers(self) -> httpx.Headers: ...

    def iter_bytes(self) -> Iterator[bytes]: ...

    def close(self) -> None: ...


class Wire:
    def __init__(self, url: str, headers: Mapping[str, str], *,
                 client: httpx.Client | None = None, max_connections: int = 64,
                 wrap_transport: TransportWrapper | None = None) -> None:
        self.url = url
        self._url = httpx.URL(url)
        self._headers = headers  # read at the first request: a dialect may add to it
        self._raw_headers: list[tuple[bytes, bytes]] | None = None
        self._head_start: bytes | None = None  # the lean request head up to Content-Length's value
        self._max_connections = max_connections
        self._client = client
        self.owns_client = client is None
        self._transport: httpx.BaseTransport | None = None
        self._pool: Pool | None = None
        if client is not None:
            return
        if wrap_transport is None and _speaks(self._url):
            self._pool = Pool(self._url, max_connections)
            return
        limits = httpx.Limits(max_connections=max_connections,
                              max_keepalive_connections=max_connections)
        transport: httpx.BaseTransport = httpx.HTTPTransport(limits=limits)
        if wrap_transport is not None:
            transport = wrap_transport(transport)
        self._transport = transport

    @property
    def client(self) -> httpx.Client:
        """An httpx Client for the odd request that is not the hot POST (a
        model list): the caller's, or one of our own made at first use."""
        if self._client is None:
            self._client = httpx.Client(
                transport=self._transport, follow_redirects=False,
                trust_env=False,  # proxies from the environment must not see the key
                limits=httpx.Limits(max_connections=self._max_connections,
                                    max_keepalive_connections=self._max_connections))
        return self._client

    def post(self, payload: bytes, timeout: float) -> WireResponse:
        """An open streamed response to POSTing `payload`; the caller closes it.
        Raises what httpx raises (TimeoutException, ConnectError, HTTPError)
        and whatever a wrapping transport raises."""
        if self._pool is not None:
            return self._pool.post(self._head(len(payload)), payload, timeout)
        if self._transport is None:  # a caller's client: its cookies, hooks, auth, ...
            built = self.client.build_request("POST", self._url, content=payload,
                                              headers=self._headers, timeout=timeout)
            return self.client.send(built, stream=True)
        request = httpx.Request("POST", self._url, headers=self._wire_headers(), content=payload,
                                extensions={"timeout": httpx.Timeout(timeout).as_dict()})
        response = self._transport.handle_request(request)
        response.request = request  # as the Client does: errors raised while reading name it
        return response

    def close(self) -> None:
        if self._pool is not None:
            self._pool.close()
        if self.owns_client and self._client is not None:
            self._client.close()
        elif self._transport is not None:
            self._transport.close()

    def _wire_headers(self) -> list[tuple[bytes, bytes]]:
        raw = self._raw_headers
        if raw is None:
            # The Client's defaults (User-Agent, Accept-Encoding, keep-alive)
            # under the backend's own, as `Client.stream` merged them.
            merged = httpx.Headers({"Accept": "*/*", "Accept-Encoding": ACCEPT_ENCODING,
                                    "Connection": "keep-alive", "User-Agent": _USER_AGENT})
            merged.update(self._headers)
            raw = self._raw_headers = list(merged.raw)
        return raw

    def _head(self, length: int) -> bytes:
        head = self._head_start
        if head is None:
            lines = [b"POST " + self._url.raw_path + b" HTTP/1.1", b"Host: " + self._url.netloc]
            lines += [name + b": " + value for name, value in self._wire_headers()]
            head = self._head_start = b"\r\n".join(lines) + b"\r\nContent-Length: "
        return head + str(length).encode() + b"\r\n\r\n"


def _speaks(url: httpx.URL) -> bool:
    return url.scheme in ("http", "https") and not url.userinfo and bool(url.raw_host)
