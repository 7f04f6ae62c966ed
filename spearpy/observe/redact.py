"""Keeping secrets and tool contents out of everything spearpy writes.

Two tools: `digest` describes a text by its length and a short hash, so logs
can show that two calls got the same arguments without showing them; and
`Redactor` removes credentials from any string or JSON-like value before it is
written. The Redactor is a second line: the backend never hands the key to
anything but its Authorization header, but an upstream echoing a key in an
error, or a guest that got one through its environment, must not put it in a
log, an events file or a transcript either.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Iterable
from typing import Any

from spearpy.observe.scrub import MIN_SECRET_LEN, REDACTED, SecretScrubber
from spearpy.secret_env import BUILTIN_KEY_ENVS

__all__ = ["MIN_SECRET_LEN", "REDACTED", "Redactor", "digest", "is_secret_key", "short_sha256"]

# 12 hex digits = 48 bits: collisions among one run's tool calls are not a
# concern, and a short hash keeps log lines readable (git shows 7-12).
SHORT_HASH_LEN = 12

_SECRET_KEYS = frozenset({
    "authorization", "proxy-authorization", "proxy_authorization", "api_key", "api-key",
    "apikey", "x-api-key", "openai_api_key", "password", "secret", "client_secret",
    "access_token", "refresh_token", "bearer",
})
# Environment variables whose values are treated as secrets even when nobody
# named them: the keys of backends configured in a TOML file, cloud tokens.
_SECRET_ENV = re.compile(r"(?i)(API_?KEY|_KEY|_SECRET|_TOKEN|PASSWORD)\Z")
# Credentials that look like credentials even when nobody registered them:
# "Bearer <token>" and the sk-... / sk-proj-... shape of OpenAI-style keys.
_PATTERNS = (
    re.compile(r"(?i)\b(bearer|basic)\s+[A-Za-z0-9._~+/=-]{8,}"),
    re.compile(r"\bsk-[A-Za-z0-9_-]{16,}"),
)
# One search for any of them: almost every string matches none, and one scan
# costs a third of three substitutions.
_ANY_PATTERN = re.compile(r"(?i:\b(?:bearer|basic)\s+[A-Za-z0-9._~+/=-]{8,})"
                          r"|\bsk-[A-Za-z0-9_-]{16,}")
# No pattern matches fewer characters ("basic" + one space + 8).
_PATTERN_MIN_LEN = 14


def short_sha256(text: str | bytes) -> str:
    raw = text.encode("utf-8", "surrogatepass") if isinstance(text, str) else text
    return hashlib.sha256(raw).hexdigest()[:SHORT_HASH_LEN]


def digest(text: str | bytes) -> dict[str, Any]:
    """{"bytes": n, "sha256": "<12 hex>"}: what logs say about a content."""
    raw = text.encode("utf-8", "surrogatepass") if isinstance(text, str) else text
    return {"bytes": len(raw), "sha256": short_sha256(raw)}


def is_secret_key(key: str) -> bool:
    return key.lower() in _SECRET_KEYS


# Keys remembered per Redactor (Redactor._dict): bounded in number and in
# length, since keys can come from a guest or an upstream.
_KEYS_MAX = 4096
_KEY_CHARS_KEPT = 64


class Redactor:
    """Replaces known secret values, credential-shaped strings and the values of
    credential-named keys with a marker."""

    def __init__(self, secrets: Iterable[str] = (), *, patterns: bool = True) -> None:
        # patterns=False: only known secrets, for records that must stay
        # verbatim (transcripts) where a credential-shaped word may be legitimate.
        self._scrubber = SecretScrubber(secrets)
        self._patterns = _PATTERNS if patterns else ()
        # key -> (the key redacted, whether its value is a secret): the same
        # few keys come by in every event.
        self._keys: dict[str, tuple[str, bool]] = {}

    @classmethod
    def from_env(cls, names: Iterable[str] = BUILTIN_KEY_ENVS, *,
                 patterns: bool = True) -> Redactor:
        """A Redactor knowing the values of these environment variables and of
        every variable named like a credential (*_API_KEY, *_TOKEN, ...)."""
        wanted = {name for name in names if name}
        wanted.update(name for name in os.environ if _SECRET_ENV.search(name))
        return cls((os.environ.get(name, "") for name in wanted), patterns=patterns)

    def add(self, secret: str) -> None:
        self._scrubber.add(secret)
        self._keys = {}

    def text(self, value: str) -> str:
        # Shorter than any secret (an escaped spelling is longer than the
        # secret it spells) and than any pattern's match: nothing to find.
        if len(value) < MIN_SECRET_LEN:
            return value
        # Known secrets in every escaped spelling first, so a pattern below
        # never sees half of a key.
        value = self._scrubber.text(value)
        if self._patterns and len(value) >= _PATTERN_MIN_LEN \
                and _ANY_PATTERN.search(value) is not None:
            for pattern in self._patterns:
                value = pattern.sub(_mask, value)
        return value

    def value(self, value: Any) -> Any:
        """A copy of a JSON-like value with every secret removed."""
        kind = type(value)
        if kind is str:
            return self.text(value)
        if kind is dict:
            return self._dict(value)
        if kind is int or kind is float or kind is bool or value is None:
            return value
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            return self._dict(value)
        if isinstance(value, list | tuple):
            return [self.value(v) for v in value]
        return value

    def _dict(self, value: dict[Any, Any]) -> dict[Any, Any]:
        out: dict[Any, Any] = {}
        keys, text, walk = self._keys, self.text, self.value
        for key, item in value.items():
            if type(key) is not str and not isinstance(key, str):
                out[key] = walk(item)
                continue
            known = keys.get(key)
            if known is None:
                known = (text(key), is_secret_key(key))
                if len(key) <= _KEY_CHARS_KEPT:  # field names, not an upstream's odd keys
                    if len(keys) >= _KEYS_MAX:
                        keys.clear()
                    keys[key] = known
            kind = type(item)
            if known[1] and item:
                out[known[0]] = REDACTED
            elif kind is str:
                out[known[0]] = text(item)
            elif kind is int or kind is bool or item is None:
                out[known[0]] = item
            else:
                out[known[0]] = walk(item)
        return out


def _mask(match: re.Match[str]) -> str:
    scheme = match.group(1) if match.re.groups else None
    return f"{scheme} {REDACTED}" if scheme else REDACTED
