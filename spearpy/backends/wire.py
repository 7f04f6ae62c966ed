"""One upstream endpoint over httpx's connection pool, without the Client's
per-request machinery.

Measured on the loopback P2 exchange, `httpx.Client.stream` spent about a
third of the client's CPU per request on what a backend never uses: cookie
extraction and merging (urllib request wrappers for every reply), URL and
header merging, redirect and auth bookkeeping, event hooks. A backend posts
JSON to one fixed URL with fixed headers, so it builds the `httpx.Request`
itself and hands it to the transport: the same connection pool, timeouts,
exceptions and response decoding as before, and a `wrap_transport` (record,
replay) still sees every request. A caller's own `httpx.Client` is used the
way the backends always used it (build_request, send), with whatever it does.

What changes for users: nothing the backends relied on. No cookie a server
sets is sent back (an OpenAI-compatible API keeps no state in cookies), and,
as before, proxies from the environment are not used (they would see the key).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import httpx

TransportWrapper = Callable[[httpx.BaseTransport], httpx.BaseTransport]


class Wire:
    def __init__(self, url: str, headers: Mapping[str, str], *,
                 client: httpx.Client | None = None, max_connections: int = 64,
                 wrap_transport: TransportWrapper | None = None) -> None:
        self.url = url
        self._url = httpx.URL(url)
        self._headers = headers  # read at the first request: a dialect may add to it
        self._raw_headers: list[tuple[bytes, bytes]] | None = None
        self.owns_client = client is None
        self._transport: httpx.BaseTransport | None = None
        if client is None:
            limits = httpx.Limits(max_connections=max_connections,
                                  max_keepalive_connections=max_connections)
            transport: httpx.BaseTransport = httpx.HTTPTransport(limits=limits)
            if wrap_transport is not None:
                transport = wrap_transport(transport)
            self._transport = transport
            client = httpx.Client(
                transport=transport,
                follow_redirects=False,
                trust_env=False,  # proxies from the environment must not see the key
            )
        # For the odd request that is not the hot POST (a model list), and for
        # a caller's client, which keeps its own behaviour.
        self.client = client

    def post(self, payload: bytes, timeout: float) -> httpx.Response:
        """An open streamed response to POSTing `payload`; the caller closes it.
        Raises what httpx raises (TimeoutException, ConnectError, HTTPError)
        and whatever a wrapping transport raises."""
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
        if self.owns_client:
            self.client.close()

    def _wire_headers(self) -> list[tuple[bytes, bytes]]:
        raw = self._raw_headers
        if raw is None:
            # The Client's defaults (User-Agent, Accept-Encoding, keep-alive)
            # under the backend's own, as `Client.stream` merged them.
            merged = httpx.Headers(self.client.headers)
            merged.update(self._headers)
            raw = self._raw_headers = list(merged.raw)
        return raw
