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
from collections.abc import Callable
from itertools import accumulate
from typing import Any

from spearpy.errors import SpearpyError

MAX_JSON_DEPTH = 64
"""Deepest nesting of arrays and objects accepted. Tool schemas and
arguments in practice stay under ten; jsonschema validates 64 levels with a
wide margin to the recursion limit."""

MAX_JSON_CONTAINERS = 250_000
"""Most arrays and objects accepted in one document. A 32 MiB upstream answer
of `[{},{},...]` parsed into 11 million dicts: ~870 MB and 2.4 s holding the
GIL, per run. Honest documents (a completion, tool arguments, a schema) hold
hundreds; 250 000 empty dicts are ~18 MB."""


class StructureError(SpearpyError, json.JSONDecodeError):
    """Refused before parsing: nested too deep, or too many arrays and objects."""


_STRINGS = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
# Openers to +1 and closers to -1 as signed bytes: the running sum is the depth.
_SIGNS = bytes.maketrans(b"[]{}", b"\x01\xff\x01\xff")


def loads(raw: str | bytes, *, allow_nan: bool = True,
          max_containers: int | None = MAX_JSON_CONTAINERS,
          max_depth: int = MAX_JSON_DEPTH) -> Any:
    """`json.loads` that refuses nesting deeper than `max_depth`, and
    more than `max_containers` arrays and objects (None: any number, for a
    file the user chose, such as a cassette). A deeper `max_depth` is for a
    document that wraps a value parsed at MAX_JSON_DEPTH in a few levels of
    its own (a journal record); it must stay far below the recursion limit.

    allow_nan=False also refuses NaN and ±Infinity, which are not JSON and
    which strict servers reject when the value is sent on.
    """
    if type(raw) is str:
        # Every tool call's arguments come this way: the checks are inlined
        # and the C scanner is called directly. JSONDecoder.decode adds two
        # Python calls and two whitespace matches around that same scanner;
        # it still decides (and words the error of) anything but a document
        # that starts at its first character and fills the text.
        # A text no longer than the depth bound holds no more brackets than
        # that: the usual tool arguments skip the two counts.
        if len(raw) > max_depth and raw.count("[") + raw.count("{") > max_depth and (
                problem := _structure_problem(raw, max_containers, max_depth)):
            raise StructureError(problem, raw, 0)
        try:
            value, end = (_SCAN if allow_nan else _STRICT_SCAN)(raw, 0)
        except StopIteration:
            end = -1
        if end != len(raw):
            value = json.loads(raw) if allow_nan else _STRICT.decode(raw)
        if "\\u" in raw and _may_hold_surrogates(raw):
            value = _replace_lone_surrogates(value)
        return value
    problem = _structure_problem(raw, max_containers, max_depth)
    if problem is not None:
        text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
        raise StructureError(problem, text, 0)
    if allow_nan:
        value = json.loads(raw)
    else:
        # json.loads(..., parse_constant=...) builds a decoder per call (~3 us).
        value = _STRICT.decode(raw.decode("utf-8") if isinstance(raw, bytes) else raw)
    if _may_hold_surrogates(raw):
        value = _replace_lone_surrogates(value)
    return value


def _may_hold_surrogates(raw: str | bytes) -> bool:
    if isinstance(raw, str):
        return "\\ud" in raw or "\\uD" in raw
    return b"\\ud" in raw or b"\\uD" in raw


_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def _replace_lone_surrogates(value: Any) -> Any:
    if isinstance(value, str):
        return _LONE_SURROGATE.sub("\ufffd", value)
    if isinstance(value, dict):
        return {_replace_lone_surrogates(k): _replace_lone_surrogates(v)
                for k, v in value.items()}
    if isinstance(value, list):
        return [_replace_lone_surrogates(v) for v in value]
    return value


def _structure_problem(raw: str | bytes, max_containers: int | None,
                       max_depth: int) -> str | None:
    """Why the document must not be parsed: nested too deep, or too many
    arrays and objects. None for the common document."""
    if isinstance(raw, str):
        if raw.count("[") + raw.count("{") <= max_depth:
            return None  # the common case: cannot be too deep or too many
        data = raw.encode("utf-8", "surrogatepass")
    else:
        if raw.count(b"[") + raw.count(b"{") <= max_depth:
            return None
        data = raw
    # The depth at C speed (strings out, brackets to +-1, running maximum):
    # a token loop in Python cost twice json.loads on a bracket-heavy body.
    signs = _STRINGS.sub(b"", data).translate(_SIGNS, _NOT_BRACKETS)
    if max(accumulate(memoryview(signs).cast("b")), default=0) > max_depth:
        return f"nested deeper than {max_depth} levels"
    if max_containers is not None and signs.count(1) > max_containers:
        return f"more than {max_containers} arrays and objects"
    return None


# What json.dumps(value, separators=(",", ":"), ensure_ascii=False) builds on
# every call (~2 us each time); built once, it encodes byte for byte the same.
_COMPACT = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)


def compact(value: Any) -> str:
    """The one JSON serialisation of what the host writes for guests, tools and
    upstreams: no whitespace (SPEAR's bodies are compact; C guests search them
    with strstr), characters as they are (UTF-8, not \\u escapes)."""
    return _COMPACT.encode(value)


def compact_bytes(value: Any) -> bytes:
    return _COMPACT.encode(value).encode()


def compact_object_with(value: dict[str, Any], key: str, encoded: bytes) -> bytes:
    """compact_bytes(value), with `encoded` standing for value[key]: a large
    member kept already encoded (the chat history) is joined in, not encoded again.
    The result is byte for byte what compact_bytes gives when `encoded` is
    compact_bytes(value[key])."""
    if not all(type(name) is str for name in value):
        return compact_bytes(value)  # json turns other keys into strings; keep its spelling
    parts = [b"{"]
    for name, member in value.items():
        if len(parts) > 1:
            parts.append(b",")
        parts.append(_COMPACT.encode(name).encode())
        parts.append(b":")
        # The large member is copied once, by the join.
        parts.append(encoded if name == key else _COMPACT.encode(member).encode())
    parts.append(b"}")
    return b"".join(parts)


def _reject_constant(token: str) -> object:
    raise ValueError(f"{token} is not valid JSON")


_STRICT = json.JSONDecoder(parse_constant=_reject_constant)
# The decoders' scanners (C): (value, end) of the document at an index.
_Scan = Callable[[str, int], tuple[Any, int]]
_SCAN: _Scan = json.JSONDecoder().scan_once  # type: ignore[attr-defined]
_STRICT_SCAN: _Scan = _STRICT.scan_once  # type: ignore[attr-defined]
