"""Removing known secret values in every spelling that decodes to them.

A secret must be removed from what a reader will *decode*, not from the bytes
as they came: a JSON string that spells one character of an API key as
`\\u0073` decodes to the key, and a tool call's `arguments` is JSON inside
JSON, so the same key escaped twice (`\\\\u0073`) decodes to it one level
later. The scrubber therefore works in two passes:

1. A precise pass replaces the secret wherever each of its characters is
   literal or a `\\u` escape (four hex digits) behind any number of
   backslashes (every JSON nesting level at once), and `\\/` for a slash. The text around
   it is kept, so a JSON document stays valid and loses nothing else.
2. A check decodes JSON escapes level by level (up to MAX_LEVELS); a string
   that still decodes to a secret after pass 1 (an exotic mix of escapes,
   such as an escaped backslash in front of an escape) is replaced whole:
   hostile text loses its content rather than a credential leaking.

Both passes cost nothing for text without a backslash beyond a plain
substring search per secret.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

REDACTED = "[redacted]"
# Shorter "secrets" would mangle ordinary text (an empty or "x" test key).
MIN_SECRET_LEN = 8
# JSON in JSON in JSON... A reader decoding more levels than this is decoding
# text of its own choosing; four covers a tool result inside an argument
# inside a body inside a transcript.
MAX_LEVELS = 6

_ONE_ESCAPE = re.compile(r'\\(?:u([0-9a-fA-F]{4})|(["\\/bfnrt]))')
_SIMPLE = {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r",
           "t": "\t"}


def _char_pattern(char: str) -> str:
    """A character as itself or as a JSON escape at any nesting depth."""
    code = ord(char)
    forms = [re.escape(char)]
    if code <= 0xFFFF:
        hexes = "".join(f"[{d.lower()}{d.upper()}]" if d.isalpha() else d
                        for d in f"{code:04x}")
        forms.append(rf"\\+u{hexes}")
    if char == "/":
        forms.append(r"\\+/")
    return "(?:" + "|".join(forms) + ")"


def _decode_once(text: str) -> str:
    def one(match: re.Match[str]) -> str:
        if match.group(1) is not None:
            return chr(int(match.group(1), 16))
        return _SIMPLE[match.group(2)]

    return _ONE_ESCAPE.sub(one, text)


class SecretScrubber:
    """Replaces known secret values, however JSON-escaped, with a marker
    (REDACTED unless the record has its own, as cassettes do)."""

    __slots__ = ("_escaped", "_marker", "_min_length", "_secret_bytes", "_secrets")

    def __init__(self, secrets: Iterable[str] = (), *, marker: str = REDACTED,
                 min_length: int = MIN_SECRET_LEN) -> None:
        self._marker = marker
        self._min_length = min_length
        self._secrets: list[str] = []
        self._secret_bytes: list[bytes] = []
        self._escaped: list[re.Pattern[str]] = []
        for secret in secrets:
            self.add(secret)

    def __bool__(self) -> bool:
        return bool(self._secrets)

    @property
    def secrets(self) -> tuple[str, ...]:
        return tuple(self._secrets)

    def add(self, secret: str) -> None:
        if len(secret) < self._min_length or secret in self._secrets:
            return
        self._secrets.append(secret)
        # Longest first: a key that contains another key is replaced whole.
        self._secrets.sort(key=len, reverse=True)
        self._secret_bytes = [s.encode("utf-8", "surrogatepass") for s in self._secrets]
        self._escaped = [re.compile("".join(_char_pattern(c) for c in s))
                         for s in self._secrets]

    def text(self, value: str) -> str:
        """The text with every secret removed in every spelling that decodes to it."""
        value = self.text_precise(value)
        if "\\" in value and self._decodes_to_secret(value):
            return self._marker
        return value

    def raw(self, data: bytes) -> bytes:
        """Bytes as they came off the wire (any encoding): the precise pass only;
        `value` checks what they decode to."""
        if not any(secret in data for secret in self._secret_bytes) \
                and b"\\u" not in data and b"\\/" not in data:
            return data  # the common reply: no secret and no escape that could spell one
        text = data.decode("utf-8", "surrogateescape")
        cleaned = self.text_precise(text)
        return data if cleaned is text else cleaned.encode("utf-8", "surrogateescape")

    def text_precise(self, value: str) -> str:
        """Pass 1 only; the same object back when nothing matched."""
        changed = value
        for secret in self._secrets:
            if secret in changed:
                changed = changed.replace(secret, self._marker)
        if "\\" in changed:
            for pattern in self._escaped:
                changed = pattern.sub(self._marker, changed)
        return value if changed == value else changed

    def value(self, value: Any) -> Any:
        """A decoded JSON value with secrets removed from every string, keys included."""
        if not self._secrets:
            return value
        return self._walk(value)

    def _walk(self, value: Any) -> Any:
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            return {(self.text(k) if isinstance(k, str) else k): self._walk(v)
                    for k, v in value.items()}
        if isinstance(value, list):
            return [self._walk(v) for v in value]
        return value

    def _decodes_to_secret(self, value: str) -> bool:
        level = value
        for _ in range(MAX_LEVELS):
            if "\\" not in level:
                return False
            decoded = _decode_once(level)
            if decoded == level:
                return False
            if any(secret in decoded for secret in self._secrets):
                return True
            level = decoded
        return False
