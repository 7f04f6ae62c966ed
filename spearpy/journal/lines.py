"""The two records a tool-calling loop writes per iteration, encoded directly.

A completion's record and a guest tool's are written once per loop
iteration, so what `make_step` + `encode` cost them (a Step built, the
request encoded, decoded and encoded again, a scrub walking every value
when a key is set) was most of what journaling a loop cost. These build
the same line (byte for byte: tests/test_journal_lines.py compares them)
from what the run holds; anything they were not written for (an unusual
type, a long name, a secret that may be in the line) returns None and the
writer takes the general path.
"""

from __future__ import annotations

import hashlib
import re
from json.encoder import encode_basestring_ascii
from typing import Any

from spearpy.journal.records import REQUEST_INLINE_MAX, line_text
from spearpy.observe.scrub import SecretScrubber

# A secret of these characters can only be spelled in ASCII JSON text as
# itself or with a `\u` escape (at some nesting depth, which still shows
# `\u`): the other escapes (`\"`, `\\`, `\/`, `\n`...) stand for characters
# it does not have.
_PLAIN = re.compile(r"[\x20\x21\x23-\x2e\x30-\x5b\x5d-\x7e]+")


class EncodedScrub:
    """Whether scrubbing would change a value, decided from its ASCII JSON
    text: a text that holds no secret and no `\\u` escape is the text of a
    value with no secret in any spelling (docs/durable.md, "What is never
    stored"), so the value need not be walked and copied."""

    __slots__ = ("_plain", "_secrets")

    def __init__(self, scrubber: SecretScrubber) -> None:
        self._secrets = scrubber.secrets
        self._plain = all(_PLAIN.fullmatch(s) for s in self._secrets)

    def __bool__(self) -> bool:
        """Whether there is anything to scrub at all."""
        return bool(self._secrets)

    def clean(self, text: str) -> bool:
        if not self._secrets:
            return True
        if not self._plain or "\\u" in text:
            return False
        return not any(secret in text for secret in self._secrets)


def completion_line(seq: int, request_sha256: str, answer: Any, scrub: EncodedScrub,
                    scrubber: SecretScrubber, raw_body: bytes | None = None) -> bytes:
    """A `chat.completion` step: its request's digest, its answer scrubbed.
    `raw_body`: the answer's body as the upstream sent it, spliced in
    instead of encoding the body again when it can stand in a line as it is
    (ASCII, one line, holding no secret)."""
    text = _with_raw_body(answer, raw_body, scrub) if raw_body is not None else None
    if text is None:
        text = line_text(answer)
        if not scrub.clean(text):
            text = line_text(scrubber.value(answer))
    return (f'{{"seq":{seq},"kind":"chat.completion","request_sha256":'
            f'"{request_sha256}","answer":{text}}}').encode("ascii")


_ANSWER_KEYS = ("backend", "model", "body", "error", "latency_ms", "t")
# Bytes no JSON text in UTF-8 holds outside a string's escapes but tab and
# space: json.loads(bytes) reads a body with NULs as UTF-16 or UTF-32, whose
# bytes are ASCII but are neither the line's JSON nor scrubbed as text.
_NOT_IN_A_LINE = re.compile(rb"[\x00-\x08\x0a-\x1f\x7f]")


def _with_raw_body(answer: Any, raw: bytes, scrub: EncodedScrub) -> str | None:
    """The answer's text with `raw` as its body; None when `raw` may not stand
    in a line as it is. A valid JSON text holds a raw CR or LF only as
    whitespace (never inside a string), and non-ASCII only inside strings,
    but the line must be ASCII and one line: such a body is encoded again,
    as is one with other control bytes (UTF-16 or UTF-32 to json.loads)."""
    if not (raw.isascii() and not _NOT_IN_A_LINE.search(raw)
            and tuple(answer) == _ANSWER_KEYS and answer["error"] is None):
        return None
    # No value encoded before the body can hold this text: a string's quotes are escaped.
    text = line_text({**answer, "body": None}).replace(
        '"body":null', f'"body":{raw.decode("ascii").strip()}', 1)
    # The whole line, not the body alone: the model beside it may be the request's own.
    return text if scrub.clean(text) else None


def guest_output_line(seq: int, name: str, arguments: str, ok: bool, output: str,
                      error_code: str | None, scrubber: SecretScrubber) -> bytes | None:
    """A `guest_tool.output` step ({"name", "arguments"} -> the output's
    digest), or None when it is not of the usual types and sizes."""
    if not (type(name) is str and type(arguments) is str and type(ok) is bool
            and type(output) is str and (error_code is None or type(error_code) is str)):
        return None
    if scrubber:
        name, arguments, output = scrubber.text(name), scrubber.text(arguments), \
            scrubber.text(output)
        error_code = scrubber.text(error_code) if error_code is not None else None
    shown = encode_basestring_ascii(name)
    if len(shown) + 100 > REQUEST_INLINE_MAX:
        return None  # the request would be kept as its digest: the general path
    arguments_sha256 = hashlib.sha256(encode_basestring_ascii(arguments).encode("ascii"))
    code = "null" if error_code is None else encode_basestring_ascii(error_code)
    answer = f'[{"true" if ok else "false"},{encode_basestring_ascii(output)},{code}]'
    answer_sha256 = hashlib.sha256(answer.encode("ascii")).hexdigest()
    return (f'{{"seq":{seq},"kind":"guest_tool.output","request":{{"name":{shown},'
            f'"arguments_sha256":"{arguments_sha256.hexdigest()}"}},'
            f'"answer_sha256":"{answer_sha256}"}}').encode("ascii")


# The hostcalls' names are the host's own: dotted ASCII words.
_CALL_NAME = re.compile(r"[a-z0-9_.]{1,64}")


def hostcall_line(seq: int, call: str, args: tuple[int, ...] | list[int], rc: int | None,
                  writes: list[list[Any]], t: float, scrubber: SecretScrubber) -> bytes | None:
    """A `hostcall` step ({"call", "args"} -> {"rc", "writes", "t"}, `writes`
    as hostcall_answers.stored_writes gives them, already scrubbed), or None when it
    is not of the usual shape (the general path then decides and encodes it).
    Only the name is text a secret could spell."""
    if not (type(call) is str and _CALL_NAME.fullmatch(call)
            and all(type(arg) is int for arg in args)):
        return None
    if scrubber and scrubber.text(call) != call:
        return None
    shown_writes = ",".join([f'[{address},"{data}"]' for address, data in writes])
    return (f'{{"seq":{seq},"kind":"hostcall","request":{{"call":"{call}","args":['
            f'{",".join(map(str, args))}]}},"answer":{{"rc":{"null" if rc is None else rc},'
            f'"writes":[{shown_writes}],"t":{float(t)!r}}}}}').encode("ascii")
