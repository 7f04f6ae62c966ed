"""Recording: an httpx transport that writes every exchange to a cassette.

It sits under the backend (retries, quirks and dialect mapping all happen
above it), so a cassette holds exactly what went over the wire: each attempt,
failed ones included, with the secrets removed.
"""

from __future__ import annotations

from typing import Any

import httpx

from spearpy.backends.cassette import (
    KEPT_REQUEST_HEADERS,
    KEPT_RESPONSE_HEADERS,
    CassetteWriter,
    encode_body,
    kept_headers,
    redact_url,
    scrub,
    secrets_in_headers,
)
from spearpy.backends.httpbackend import MAX_RESPONSE_BYTES

# httpx decodes the body for us; these would describe bytes no longer there.
_STALE_HEADERS = frozenset({"content-encoding", "content-length", "transfer-encoding"})


class RecordingTransport(httpx.BaseTransport):
    def __init__(self, inner: httpx.BaseTransport, writer: CassetteWriter, backend: str) -> None:
        self._inner = inner
        self._writer = writer
        self._backend = backend

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        headers = dict(request.headers)
        url, url_secrets = redact_url(str(request.url))
        secrets = sorted(set(secrets_in_headers(headers) + url_secrets), key=len, reverse=True)
        entry: dict[str, Any] = {
            "method": request.method, "url": url,
            "headers": kept_headers(headers, KEPT_REQUEST_HEADERS),
            **encode_body(request.read()),
        }  # fmt: skip
        try:
            response = self._inner.handle_request(request)
            raw = _read_capped(response)
        except httpx.HTTPError as exc:
            self._write(entry, {"error": {"type": type(exc).__name__,
                                          "message": str(exc)}}, secrets)
            raise
        recorded: dict[str, Any] = {
            "status": response.status_code,
            "headers": kept_headers(dict(response.headers), KEPT_RESPONSE_HEADERS),
        }
        if len(raw) > MAX_RESPONSE_BYTES:
            recorded["body_omitted"] = len(raw)  # the backend refuses it anyway
        else:
            recorded.update(encode_body(raw))
        self._write(entry, {"response": recorded}, secrets)
        fresh = {k: v for k, v in response.headers.items() if k.lower() not in _STALE_HEADERS}
        return httpx.Response(response.status_code, headers=fresh, content=raw,
                              request=request)

    def _write(self, request: dict[str, Any], outcome: dict[str, Any],
               secrets: list[str]) -> None:
        exchange = {"backend": self._backend, "request": request, **outcome}
        self._writer.add_exchange(scrub(exchange, secrets))

    def close(self) -> None:
        self._inner.close()


def _read_capped(response: httpx.Response) -> bytes:
    raw = bytearray()
    try:
        for chunk in response.iter_bytes():
            raw += chunk
            if len(raw) > MAX_RESPONSE_BYTES:
                break
    finally:
        response.close()
    return bytes(raw)
