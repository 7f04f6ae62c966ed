"""A WAV file's header, read and checked field by field before any audio is.

The header is untrusted: a guest with a writable `--dir` writes any file it
likes and then opens it as its microphone. A 44-byte header saying 400 MHz
and 200 MiB of data once made the host read and convert hundreds of MB in
one step. So every field is checked against what real audio has, every
chunk size against the file's real size, and nothing here sizes a read by
a header field: only the fixed-size `fmt ` fields are read, other chunks
are skipped by seeking.

Read: integer PCM (format tag 1, or WAVE_FORMAT_EXTENSIBLE with the PCM
sub-format), 8 to 32 bits in whole bytes, 1 to MAX_CHANNELS channels, at
RATE_MIN..RATE_MAX Hz.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import BinaryIO, Final

from spearpy.errors import SpearpyError

RATE_MIN: Final = 1_000
RATE_MAX: Final = 768_000  # the fastest converters sold
MAX_CHANNELS: Final = 32
# Chunks looked at before `data`: a file of millions of empty chunks would
# otherwise keep the guest's thread seeking.
MAX_CHUNKS: Final = 64
# A data chunk size streaming writers put when they cannot know the length:
# read such a file to its end instead of calling it truncated.
STREAMING_SIZES: Final = (0, 0xFFFFFFFF, 0x7FFFFFFF)
_PCM: Final = 1
_EXTENSIBLE: Final = 0xFFFE
# KSDATAFORMAT_SUBTYPE_PCM after its first two bytes (the format tag, 1).
_PCM_GUID_TAIL: Final = bytes.fromhex("000000001000800000aa00389b71")
_FMT: Final = struct.Struct("<HHIIHH")  # tag, channels, rate, bytes/s, block align, bits
_FMT_EXTENSIBLE_BYTES: Final = 40


class HeaderError(SpearpyError, ValueError):
    """The header cannot describe audio we play. The message names the field
    and goes on from the file's name ("x.wav has a sample rate field ...")."""


class NotWav(HeaderError):
    """Not a RIFF/WAVE file of integer PCM at all."""


class Truncated(HeaderError):
    """The file ends inside its header."""


@dataclass(frozen=True, slots=True)
class WavHeader:
    rate: int
    channels: int
    sampwidth: int  # bytes per sample
    data_offset: int  # where the audio starts in the file
    data_bytes: int  # whole frames of audio from there, within the file


def read_header(file: BinaryIO, size: int) -> WavHeader:
    """The header of `file` (`size` bytes long, positioned at its start)."""
    riff = file.read(12)
    if riff[:4] != b"RIFF":
        raise NotWav("it does not start with RIFF")
    if len(riff) < 12:
        raise Truncated("is truncated inside its WAV header")
    if riff[8:] != b"WAVE":
        raise NotWav("a RIFF file, not of WAVE")
    fmt: tuple[int, int, int] | None = None
    for _ in range(MAX_CHUNKS):
        head = file.read(8)
        if len(head) < 8:
            break
        name, length = head[:4], int.from_bytes(head[4:], "little")
        start = file.tell()
        if name == b"data":
            if fmt is None:
                raise NotWav("the data chunk comes before the fmt chunk")
            return _with_data(*fmt, start, length, size)
        if start + length > size:
            raise Truncated(f"is truncated inside its WAV header: its {_label(name)} chunk "
                            f"declares {length} bytes, the file ends {size - start} bytes "
                            "after its start")
        if name == b"fmt ":
            if fmt is not None:
                raise HeaderError("has two fmt chunks")
            fmt = _fmt(file, length)
        file.seek(start + length + (length & 1))  # chunks are padded to even sizes
    else:
        raise HeaderError(f"has more than {MAX_CHUNKS} chunks before its data chunk")
    raise NotWav("fmt chunk and/or data chunk missing")


def _exact(file: BinaryIO, n: int) -> bytes:
    raw = file.read(n)
    if len(raw) < n:
        raise Truncated("is truncated inside its WAV header")
    return raw


def _label(name: bytes) -> str:
    return repr(name.decode("latin-1"))


def _fmt(file: BinaryIO, length: int) -> tuple[int, int, int]:
    """(rate, channels, bytes per sample) of a checked fmt chunk."""
    if length < _FMT.size:
        raise HeaderError(f"has a fmt chunk of {length} bytes, under the {_FMT.size} it needs")
    raw = _exact(file, min(length, _FMT_EXTENSIBLE_BYTES))
    tag, channels, rate, _per_second, align, bits = _FMT.unpack_from(raw)
    if tag == _EXTENSIBLE:
        if len(raw) < _FMT_EXTENSIBLE_BYTES or raw[24:26] != b"\x01\x00" or \
                raw[26:40] != _PCM_GUID_TAIL:
            raise NotWav("unknown format: WAVE_FORMAT_EXTENSIBLE of a sub-format other than "
                         "integer PCM")
    elif tag != _PCM:
        raise NotWav(f"unknown format: {tag}")
    # The bytes-per-second field is not checked: nothing reads it, and
    # writers get it wrong.
    _field("channels", channels, 1, MAX_CHANNELS)
    _field("sample rate", rate, RATE_MIN, RATE_MAX, " Hz")
    _field("bits per sample", bits, 1, 32)
    sampwidth = (bits + 7) // 8
    if align != channels * sampwidth:
        raise HeaderError(f"has a block align field of {align}; {channels} channels of "
                          f"{sampwidth}-byte samples need {channels * sampwidth}")
    return rate, channels, sampwidth


def _field(name: str, value: int, low: int, high: int, unit: str = "") -> None:
    if not low <= value <= high:
        raise HeaderError(f"has a {name} field of {value}{unit} in its WAV header, outside "
                          f"{low}..{high}{unit}")


def _with_data(rate: int, channels: int, sampwidth: int, start: int, length: int,
               size: int) -> WavHeader:
    present = max(size - start, 0)
    if length in STREAMING_SIZES:
        length = present
    elif length > present:
        raise HeaderError(f"is truncated: its header declares {length} bytes of audio and the "
                          f"file holds {present}")
    block = channels * sampwidth
    return WavHeader(rate, channels, sampwidth, start, length - length % block)
