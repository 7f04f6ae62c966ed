"""SSF v1, SPEAR's stream frame: a 32-byte little-endian header, then meta
(JSON, may be empty) and data.

    magic "SPST" | version u16 = 1 | header_len u16 (>= 32) | msg_type u16 | flags u16
    stream_id u32 | seq u64 | meta_len u32 | data_len u32 | extension | meta | data

Bytes between 32 and header_len are a future header extension: kept, never
interpreted. meta_len + data_len must equal the frame's length minus
header_len exactly, so a frame is self-delimiting and a decoder never reads
past what it was given. The host moves frames as the bytes their sender
wrote (the guest reads exactly what the client sent); `check` validates a
header without copying anything, `decode` splits a frame for Python code.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from enum import IntEnum
from typing import Any, Final, NamedTuple

from spearpy.errors import SpearpyError

MAGIC: Final = b"SPST"
VERSION: Final = 1
HEADER_LEN: Final = 32
HEADER: Final = struct.Struct("<4sHHHHIQII")
# A frame's lengths are u32s, the header length a u16: the most any frame can declare.
U32_MAX: Final = 0xFFFFFFFF


class MsgType(IntEnum):
    """SPEAR's message types. The host forwards every type unchanged; only
    DATA is produced by spearpy's own bridges and clients."""

    OPEN = 1
    DATA = 2
    COMMIT = 3
    CLOSE = 4
    ACK = 5
    ERROR = 6
    PING = 7
    PONG = 8


class SsfError(SpearpyError, ValueError):
    """A frame that is not SSF v1; the message says what is wrong with it."""


class Header(NamedTuple):
    # A NamedTuple, not a dataclass: one is built per frame on the hot paths.
    msg_type: int
    flags: int
    stream_id: int
    seq: int
    header_len: int
    meta_len: int
    data_len: int


@dataclass(frozen=True, slots=True)
class Frame:
    stream_id: int
    seq: int
    data: bytes = b""
    meta: bytes = b""
    msg_type: int = MsgType.DATA
    flags: int = 0
    extension: bytes = b""  # header bytes past the 32 this version knows

    def meta_json(self) -> Any:
        """The meta section parsed (None when empty); ValueError if it is not JSON."""
        return json.loads(self.meta) if self.meta else None

    def encode(self) -> bytes:
        return encode(self)


def check(frame: bytes | bytearray | memoryview, max_frame_bytes: int | None = None) -> Header:
    """The header of a well-formed frame, or SsfError naming the problem."""
    size = len(frame)
    if max_frame_bytes is not None and size > max_frame_bytes:
        raise SsfError(f"frame of {size} bytes is over the {max_frame_bytes}-byte limit")
    if size < HEADER_LEN:
        raise SsfError(f"truncated: {size} bytes is shorter than the {HEADER_LEN}-byte header")
    magic, version, header_len, msg_type, flags, stream_id, seq, meta_len, data_len = (
        HEADER.unpack_from(frame))
    if magic != MAGIC:
        raise SsfError(f"bad magic {bytes(magic)!r} (expected {MAGIC!r})")
    if version != VERSION:
        raise SsfError(f"unsupported version {version} (expected {VERSION})")
    if header_len < HEADER_LEN:
        raise SsfError(f"header_len {header_len} is below {HEADER_LEN}")
    if header_len > size:
        raise SsfError(f"truncated: header_len {header_len} but only {size} bytes")
    body = size - header_len
    if meta_len + data_len != body:
        raise SsfError(f"meta_len {meta_len} + data_len {data_len} != {body} bytes after the "
                       "header")
    return Header(msg_type, flags, stream_id, seq, header_len, meta_len, data_len)


def decode(frame: bytes | bytearray | memoryview, max_frame_bytes: int | None = None) -> Frame:
    header = check(frame, max_frame_bytes)
    raw = memoryview(frame)
    meta_at = header.header_len
    data_at = meta_at + header.meta_len
    return Frame(stream_id=header.stream_id, seq=header.seq,
                 data=bytes(raw[data_at:data_at + header.data_len]),
                 meta=bytes(raw[meta_at:data_at]), msg_type=header.msg_type,
                 flags=header.flags, extension=bytes(raw[HEADER_LEN:meta_at]))


def encode(frame: Frame) -> bytes:
    return build(frame.stream_id, frame.seq, frame.data, frame.meta, msg_type=frame.msg_type,
                 flags=frame.flags, extension=frame.extension)


def build(stream_id: int, seq: int, data: bytes, meta: bytes = b"", *,
          msg_type: int = MsgType.DATA, flags: int = 0, extension: bytes = b"") -> bytes:
    """One frame's bytes; ValueError for a field its width cannot hold."""
    header_len = HEADER_LEN + len(extension)
    if header_len > 0xFFFF:
        raise ValueError(f"a {len(extension)}-byte header extension does not fit a u16 length")
    if len(meta) > U32_MAX or len(data) > U32_MAX:
        raise ValueError("meta and data are at most 4 GiB each")
    try:
        head = HEADER.pack(MAGIC, VERSION, header_len, msg_type, flags, stream_id, seq,
                           len(meta), len(data))
    except struct.error as exc:
        raise ValueError(f"a header field is out of range: {exc}") from None
    return b"".join((head, extension, meta, data))


def meta_bytes(meta: Any) -> bytes:
    """A meta section from what a caller passes: None (empty), raw bytes, or a
    value serialised as compact JSON."""
    if meta is None:
        return b""
    if isinstance(meta, bytes | bytearray | memoryview):
        return bytes(meta)
    return json.dumps(meta, separators=(",", ":"), ensure_ascii=False).encode()
