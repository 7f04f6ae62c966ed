"""Stream session tokens: short-lived, scoped to one run, presented on the
WebSocket upgrade (SPEAR's `POST .../streams/session`, 60 s like SPEAR's).

Only a hash of each token is kept, so the lookup's timing says nothing about
a guessed token, and the table is bounded: a caller minting tokens in a loop
pushes out the oldest, never memory.
"""

from __future__ import annotations

import hashlib
import secrets
import threading
import time
from collections import OrderedDict
from enum import Enum
from typing import Final

TOKEN_TTL_S: Final = 60.0
MAX_TOKENS: Final = 10_000


class Verdict(Enum):
    OK = "ok"
    INVALID = "invalid"  # unknown or expired
    OTHER_RUN = "other_run"  # valid, for another run


class StreamTokens:
    def __init__(self, ttl_s: float = TOKEN_TTL_S, max_tokens: int = MAX_TOKENS) -> None:
        self.ttl_s = ttl_s
        self._max = max_tokens
        self._lock = threading.Lock()
        self._tokens: OrderedDict[bytes, tuple[str, float]] = OrderedDict()

    def issue(self, run_id: str) -> str:
        token = secrets.token_urlsafe(32)
        now = time.monotonic()
        with self._lock:
            self._expire(now)
            while len(self._tokens) >= self._max:
                self._tokens.popitem(last=False)
            self._tokens[_digest(token)] = (run_id, now + self.ttl_s)
        return token

    def check(self, token: str, run_id: str) -> Verdict:
        """Whether `token` lets its bearer attach to `run_id` now. Reusable
        until it expires, as SPEAR's are: a client may reconnect."""
        with self._lock:
            entry = self._tokens.get(_digest(token))
        if entry is None or entry[1] <= time.monotonic():
            return Verdict.INVALID
        return Verdict.OK if entry[0] == run_id else Verdict.OTHER_RUN

    def revoke_run(self, run_id: str) -> None:
        """The run ended: its tokens can attach to nothing any more."""
        with self._lock:
            for key in [k for k, (rid, _) in self._tokens.items() if rid == run_id]:
                del self._tokens[key]

    def _expire(self, now: float) -> None:
        # Insertion order is expiry order (one TTL for all).
        while self._tokens:
            key, (_rid, expires) = next(iter(self._tokens.items()))
            if expires > now:
                return
            del self._tokens[key]


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).digest()
