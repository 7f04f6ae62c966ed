"""The journal's two JSON spellings: canonical (digests are of it) and the line's.

Both are ASCII (`\\u` escapes) with no spaces. Canonical sorts keys; a line
keeps insertion order (seq and kind first, for a reader of the file). ASCII
so no store has to care about encodings, and no raw newline can end a line
early.
"""

from __future__ import annotations

import hashlib
from _json import make_encoder
from collections.abc import Callable
from json.encoder import encode_basestring_ascii
from typing import Any

from spearpy.journal.errors import JournalError


def _not_json(value: object) -> Any:
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def _encoder(*, sort_keys: bool) -> Callable[[Any], str]:
    """JSONEncoder(separators=(",", ":"), ensure_ascii=True).encode as its C
    encoder, made once: JSONEncoder.encode builds one per call, which was a
    third of encoding a completion's body (a record per completion). No
    circular check: a value that holds itself is a RecursionError instead."""
    encode = make_encoder(None, _not_json, encode_basestring_ascii, None, ":", ",",
                          sort_keys, False, True)
    join = "".join
    return lambda value: join(encode(value, 0))


canonical_text = _encoder(sort_keys=True)
line_text = _encoder(sort_keys=False)


def canonical(value: Any) -> bytes:
    try:
        return canonical_text(value).encode("ascii")
    except (TypeError, ValueError, RecursionError) as exc:
        raise JournalError(f"not JSON: {exc}") from exc


def sha256_json(value: Any) -> str:
    return hashlib.sha256(canonical(value)).hexdigest()
