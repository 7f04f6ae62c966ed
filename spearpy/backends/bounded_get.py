"""A GET whose answer is bounded in size and in time, for the small lists a
backend asks a server for (OpenAI's `/models`, Ollama's `/api/tags` and
`/api/ps`).

The server's answer is untrusted: `response.content` would hold whatever it
sends (an endless body fills the host's memory), and httpx's timeout bounds
each read, not the answer (a server dripping a byte at a time holds the
caller for ever). Here the answer is read raw, uncompressed (a compressed
answer could inflate past any bound), and given up on past `max_bytes` or
`timeout` seconds.
"""

from __future__ import annotations

import time
from collections.abc import Mapping

import httpx

from spearpy.errors import SpearpyError

__all__ = ["AnswerRefused", "bounded_get"]


class AnswerRefused(SpearpyError):
    """The answer went past a bound (the message says which)."""


def bounded_get(client: httpx.Client, url: str, *, headers: Mapping[str, str],
                timeout: float, max_bytes: int) -> tuple[int, bytes]:
    """(status, body) of GET `url`. Raises AnswerRefused past a bound and
    httpx.HTTPError for what goes wrong on the way."""
    give_up = time.monotonic() + timeout
    asked = {**headers, "Accept-Encoding": "identity"}
    with client.stream("GET", url, headers=asked, timeout=timeout) as response:
        raw = bytearray()
        for chunk in response.iter_raw():
            raw += chunk
            if len(raw) > max_bytes:
                raise AnswerRefused(f"the answer is larger than {max_bytes} bytes")
            if time.monotonic() > give_up:
                raise AnswerRefused(f"the answer took longer than {timeout:g} s")
        return response.status_code, bytes(raw)
