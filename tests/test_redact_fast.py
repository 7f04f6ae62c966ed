"""Redactor's fast paths (short strings, one pattern scan, remembered keys)
remove exactly what the plain walk over every string with every pattern
removes: compared on generated JSON-like values holding secrets, escaped
secrets, credential-shaped words and credential-named keys."""

from __future__ import annotations

import re
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from spearpy.observe.redact import REDACTED, Redactor, is_secret_key
from spearpy.observe.scrub import SecretScrubber

SECRETS = ["sk-fast-" + "q" * 24, "another-secret-value"]
_PATTERNS = (re.compile(r"(?i)\b(bearer|basic)\s+[A-Za-z0-9._~+/=-]{8,}"),
             re.compile(r"\bsk-[A-Za-z0-9_-]{16,}"))


def _mask(match: re.Match[str]) -> str:
    scheme = match.group(1) if match.re.groups else None
    return f"{scheme} {REDACTED}" if scheme else REDACTED


def reference(value: Any, scrubber: SecretScrubber) -> Any:
    """Every string through the scrubber and every pattern; nothing skipped."""
    def text(s: str) -> str:
        s = scrubber.text(s)
        for pattern in _PATTERNS:
            s = pattern.sub(_mask, s)
        return s

    if isinstance(value, str):
        return text(value)
    if isinstance(value, dict):
        return {(text(k) if isinstance(k, str) else k):
                (REDACTED if isinstance(k, str) and is_secret_key(k) and v
                 else reference(v, scrubber)) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [reference(v, scrubber) for v in value]
    return value


_WORDS = st.sampled_from([
    *SECRETS, "sk-fast-\\u0071" + "q" * 23, "Bearer abcdefghijk", "basic  QWxhZGRpbjpvcGVu",
    "sk-" + "z" * 16, "sk-short", "ok", "bearer", "x" * 7, "x" * 8, "x" * 13, "x" * 14,
    "the end", "\\n", "\\\\u0073k-", "",
])
_TEXT = st.lists(_WORDS | st.text(max_size=12), max_size=4).map(" ".join) \
    | st.lists(_WORDS, max_size=3).map("".join)
_KEYS = st.sampled_from(["api_key", "Authorization", "token", "content", "kind",
                         SECRETS[1], "x" * 9]) | st.text(max_size=10)
_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | _TEXT,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_KEYS, inner, max_size=4)
    | st.tuples(inner, inner),
    max_leaves=20)


@settings(max_examples=400, deadline=None)
@given(_VALUES)
def test_fast_redaction_equals_the_plain_walk(value: Any) -> None:
    redactor = Redactor(SECRETS)
    expected = reference(value, SecretScrubber(SECRETS))
    assert redactor.value(value) == expected
    assert redactor.value(value) == expected  # again, with its keys remembered


def test_a_secret_added_later_reaches_remembered_keys() -> None:
    redactor = Redactor()
    later = "late-secret-" + "k" * 12
    assert redactor.value({later: 1}) == {later: 1}
    redactor.add(later)
    assert redactor.value({later: 1}) == {REDACTED: 1}
