"""The file source: a WAV or raw PCM file decoded, mixed and resampled to the
mic's format, a bounded step at a time (a long file never sits in memory
whole).

WAV headers are read and checked by spearpy.audio.wavheader (the file may
be the guest's own: no header field sizes a read); resampling is libsoxr's
(the `soxr` package), whose streaming resampler keeps its state across
steps, so step edges leave no clicks. The header is checked when the file
is opened, on the guest's thread, so a file the source cannot play fails
the set-param with a clear error; decoding runs on the pump's thread.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

import numpy as np
import soxr  # type: ignore[import-untyped]

from spearpy.audio import wavheader
from spearpy.audio.params import MicFormat
from spearpy.audio.pcm import Rechunker, remix, to_float, to_pcm16
from spearpy.errors import SpearpyError

RAW_SUFFIXES = (".pcm", ".raw")
# The most one step holds in any of its arrays (the bytes read, their float
# copy, the resampled output): a fixed size, whatever rate, channel count or
# length the header says, so memory does not grow with what the file claims.
STEP_BYTES = 256 << 10
_FLOAT = 4  # bytes of a float32 sample


class AudioFileError(SpearpyError):
    """The file cannot be played: the message says why, for last_error."""


def step_frames(rate: int, channels: int, sampwidth: int, fmt: MicFormat) -> int:
    """Input frames per step, so that no array of the step passes STEP_BYTES:
    the raw bytes, their float32 copy, and the resampled float32 output."""
    widest_in = max(channels * sampwidth, channels * _FLOAT, fmt.channels * _FLOAT)
    out_per_in = fmt.channels * _FLOAT * fmt.sample_rate_hz / rate
    return max(1, int(STEP_BYTES // max(widest_in, out_per_in)))


class FileSource:
    name = "file"

    def __init__(self, path: Path, fmt: MicFormat, *, realtime: bool) -> None:
        self.paced = realtime
        self.lossless = not realtime
        self._fmt = fmt
        self._path = path
        try:
            # A FIFO or a device in a mount would block or never end: only files.
            if not stat.S_ISREG(path.stat().st_mode):
                raise AudioFileError(f"{path.name} is not a regular file")
            self._file: BinaryIO = open(path, "rb")  # noqa: SIM115 (closed by close())
        except OSError as exc:
            raise AudioFileError(f"cannot open {path.name}: {exc.strerror}") from None
        try:
            self._open_header()
        except BaseException:
            self._file.close()
            raise

    def _open_header(self) -> None:
        fmt, size = self._fmt, os.fstat(self._file.fileno()).st_size
        if self._path.suffix.lower() in RAW_SUFFIXES:
            self.rate, self.channels, self.sampwidth = fmt.sample_rate_hz, fmt.channels, 2
            self.data_bytes = size
            return
        name = self._path.name
        try:
            header = wavheader.read_header(self._file, size)
        except wavheader.NotWav as exc:
            raise AudioFileError(f"{name} is not a PCM WAV file ({exc}); only integer PCM WAV "
                                 "or raw .pcm/.raw PCM16 is read") from None
        except wavheader.HeaderError as exc:
            raise AudioFileError(f"{name} {exc}") from None
        self.rate, self.channels, self.sampwidth = header.rate, header.channels, header.sampwidth
        self.data_bytes = header.data_bytes
        self._file.seek(header.data_offset)

    def frames(self) -> Iterator[bytes]:
        fmt = self._fmt
        block = self.channels * self.sampwidth
        step = step_frames(self.rate, self.channels, self.sampwidth, fmt) * block
        resampler = None
        if self.rate != fmt.sample_rate_hz:
            resampler = soxr.ResampleStream(self.rate, fmt.sample_rate_hz, fmt.channels,
                                            dtype="float32", quality="HQ")
        chunks = Rechunker(fmt.frame_bytes)
        left = self.data_bytes - self.data_bytes % block
        # Already the mic's format: the bytes go through untouched.
        same = resampler is None and self.sampwidth == 2 and self.channels == fmt.channels
        while True:
            raw = self._file.read(min(step, left)) if left > 0 else b""
            left -= len(raw)
            last = not raw or left <= 0
            if same:
                yield from chunks.feed(raw)
                if last:
                    break
                continue
            samples = remix(to_float(raw, self.sampwidth, self.channels), fmt.channels)
            if resampler is not None:
                samples = resampler.resample_chunk(samples, last=last).reshape(-1, fmt.channels)
            yield from chunks.feed(to_pcm16(samples.astype(np.float32, copy=False)))
            if last:
                break
        tail = chunks.flush()
        if tail is not None:
            yield tail

    def close(self) -> None:
        self._file.close()
