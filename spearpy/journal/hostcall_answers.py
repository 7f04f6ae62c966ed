"""A `hostcall` step's answer, built as a run records it and read back as a
replay serves it: {"rc": int or null, "writes": [[guest address, base64],
...], "t": ms since the run started}. records.py checks every hostcall step
against this shape (hostcall_writes) when it is made and when it is read.
"""

from __future__ import annotations

import base64
import binascii
import math
from collections.abc import Iterable
from typing import Any

from spearpy.journal.errors import JournalCorrupt, JournalError, shown
from spearpy.observe.scrub import SecretScrubber


def hostcall_answer(rc: int | None, writes: Iterable[tuple[int, bytes | bytearray | memoryview]],
                    t: float, scrubber: SecretScrubber) -> dict[str, Any]:
    """A `hostcall` step's answer: the return value (None for a call without
    one), what the call wrote into guest memory, when (ms since the run started).
    Each write is scrubbed before base64, which would hide a secret from the
    record's scrub, and keeps its length: replay writes it into a buffer of
    that size."""
    check_hostcall_answer(rc, t)
    return {"rc": rc, "writes": stored_writes(writes, scrubber), "t": float(t)}


def check_hostcall_answer(rc: int | None, t: float) -> None:
    """JournalError unless `rc` and `t` are what a hostcall answer may hold
    (the writer checks them before it builds the line itself)."""
    if rc is not None and type(rc) is not int:
        raise JournalError(f"a hostcall's rc is an int or None, not {type(rc).__name__}")
    if type(t) not in (int, float) or not math.isfinite(t):
        raise JournalError(f"a hostcall's t is a finite number of ms, not {shown(t)}")


def stored_writes(writes: Iterable[tuple[int, bytes | bytearray | memoryview]],
                  scrubber: SecretScrubber) -> list[list[Any]]:
    """A hostcall's memory writes as its answer stores them: [address, base64]."""
    stored = []
    for address, data in writes:
        if type(address) is not int or address < 0:
            raise JournalError("a hostcall write's address is a guest address, not "
                               f"{shown(address)}")
        if not isinstance(data, bytes | bytearray | memoryview):
            raise JournalError(f"a hostcall write is bytes, not {type(data).__name__}")
        raw = bytes(data)
        cleaned = scrub_bytes(raw, scrubber)
        if len(cleaned) != len(raw):
            cleaned = (cleaned + _PAD * len(raw))[:len(raw)]
        stored.append([address, base64.b64encode(cleaned).decode("ascii")])
    return stored


def hostcall_writes(answer: Any) -> list[tuple[int, bytes]]:
    """The (guest address, bytes) pairs a stored hostcall answer wrote;
    JournalCorrupt when the answer is not of hostcall_answer's shape."""
    if not (isinstance(answer, dict) and answer.keys() == {"rc", "writes", "t"}):
        raise JournalCorrupt('a hostcall answer is not {"rc", "writes", "t"}')
    if answer["rc"] is not None and type(answer["rc"]) is not int:
        raise JournalCorrupt("a hostcall answer's rc is not an int or null")
    if type(answer["t"]) not in (int, float) or not is_ms(answer["t"]):
        raise JournalCorrupt("a hostcall answer's t is not a number of ms")
    if not isinstance(answer["writes"], list):
        raise JournalCorrupt("a hostcall answer's writes is not a list")
    writes = []
    for write in answer["writes"]:
        if not (isinstance(write, list) and len(write) == 2 and type(write[0]) is int
                and write[0] >= 0 and isinstance(write[1], str)):
            raise JournalCorrupt("a hostcall write is not [guest address, base64]")
        # Guest memory masks an address to 32 bits: a longer one would land
        # inside it, where the journaled run never wrote.
        if write[0] > U32_MAX:
            raise JournalCorrupt(f"a hostcall write's address {write[0]} is past a 32-bit "
                                 "guest's memory")
        writes.append((write[0], b64_field(write[1], "a hostcall write")))
    return writes


U32_MAX = 0xFFFFFFFF


def is_ms(value: int | float) -> bool:
    """A time or a duration in a record: not negative (which would give a
    resumed run more than its timeout), finite (a time past the run's
    timeout only ends it), and an int one a float can hold."""
    return value >= 0 and (math.isfinite(value) if type(value) is float else value < 2**63)


def hostcall_rc(answer: dict[str, Any], bits: int = 64) -> int | None:
    """The result a stored hostcall answer gives the guest, for a call whose
    result is `bits` wide. Checked only as it is served: a wider one would
    reach the guest as its low bits, and a replay hook (the mic's) as itself.
    Signed or unsigned: the same bits either way."""
    rc: int | None = answer["rc"]
    if rc is not None and not -(2 ** (bits - 1)) <= rc < 2**bits:
        raise JournalCorrupt(f"its rc is not a {bits}-bit int or null: {shown(rc)}")
    return rc


def clock_micros(answer: dict[str, Any]) -> int:
    """The send loop's clock reading a `host.clock` answer holds (µs into the run)."""
    micros = answer["rc"]
    if type(micros) is not int or not is_ms(micros):
        raise JournalCorrupt(f"the send loop's clock is not a reading in µs: {shown(micros)}")
    return micros


_PAD = b"*"  # fills a write its redaction shortened


def scrub_bytes(data: bytes, scrubber: SecretScrubber) -> bytes:
    """The bytes with every secret spelling removed; the same object when none.
    Base64 would hide a secret from any later scrub, so this runs first."""
    if not scrubber:
        return data
    text = data.decode("utf-8", "surrogateescape")
    cleaned = scrubber.text(text)
    return data if cleaned == text else cleaned.encode("utf-8", "surrogateescape")


def b64_field(text: str, what: str = "a base64 field") -> bytes:
    """A base64 field of a record (a write, stdin) decoded; JournalCorrupt if it is not."""
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise JournalCorrupt(f"{what} is not base64") from None
