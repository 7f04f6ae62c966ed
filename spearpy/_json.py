"""JSON parsing for text the host does not trust (guest memory, model output,
upstream bodies, user files).

`json.loads` recurses once per nesting level and raises RecursionError near
Python's recursion limit. Catching that is not enough: while the stack is that
deep, any finalizer the garbage collector runs (wasmtime objects free
themselves through ctypes) fails too, and that failure escapes as an
unraisable exception. So nesting is bounded *before* parsing, well below the
limit, and too-deep text is an ordinary `json.JSONDecodeError`.
"""

from __future__ import annotations

import json
import re
from itertools import accumulate
from typing import Any

MAX_JSON_DEPTH = 64
"""Deepest nesting of arrays and objects accepted. Tool schemas and
arguments in practice stay under ten; jsonschema validates 64 levels with a
wide margin to the recursion limit."""

_TOKENS = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}]', re.DOTALL)
_STRINGS = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
# Openers to +1 and closers to -1 as signed bytes: the running sum is the depth.
_SIGNS = bytes.maketrans(b"[]{}", b"\x01\xff\x01\xff")


def loads(raw: str | bytes, *, allow_nan: bool = True) -> Any:
    """`json.loads` that refuses nesting deeper than MAX_JSON_DEPTH.

    allow_nan=False also refuses NaN and ±Infinity, which are not JSON and
    which strict servers reject when the value is sent on.
    """
    position = _too_deep_at(raw)
    if position >= 0:
        text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
        raise json.JSONDecodeError(
            f"nested deeper than {MAX_JSON_DEPTH} levels", text, position
        )
    if allow_nan:
        return json.loads(raw)
    # json.loads(..., parse_constant=...) builds a decoder per call (~3 us).
    return _STRICT.decode(raw.decode("utf-8") if isinstance(raw, bytes) else raw)


def _too_deep_at(raw: str | bytes) -> int:
    """Offset of the first opener past MAX_JSON_DEPTH, or -1."""
    if isinstance(raw, str):
        if raw.count("[") + raw.count("{") <= MAX_JSON_DEPTH:
            return -1  # the common case: cannot be too deep
        data = raw.encode("utf-8", "surrogatepass")
    else:
        if raw.count(b"[") + raw.count(b"{") <= MAX_JSON_DEPTH:
            return -1
        data = raw
    # The depth at C speed (strings out, brackets to +-1, running maximum):
    # a token loop in Python cost twice json.loads on a bracket-heavy body.
    signs = _STRINGS.sub(b"", data).translate(_SIGNS, _NOT_BRACKETS)
    if max(accumulate(memoryview(signs).cast("b")), default=0) <= MAX_JSON_DEPTH:
        return -1
    return _first_too_deep(raw if isinstance(raw, str) else raw.decode("latin-1"))


def _first_too_deep(text: str) -> int:
    """Where nesting first passes the limit (only run when it does)."""
    depth = 0
    for match in _TOKENS.finditer(text):
        first = match.group()[0]  # a bracket, or the quote of a skipped string
        if first in "[{":
            depth += 1
            if depth > MAX_JSON_DEPTH:
                return match.start()
        elif first in "]}":
            depth -= 1
    return 0  # only unbalanced text gets here; it is invalid JSON anyway


def _reject_constant(token: str) -> object:
    raise ValueError(f"{token} is not valid JSON")


_STRICT = json.JSONDecoder(parse_constant=_reject_constant)
