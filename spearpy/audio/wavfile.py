"""The file source: a WAV or raw PCM file decoded, mixed and resampled to the
mic's format, a block at a time (a long file never sits in memory whole).

WAV headers are read with the standard library's `wave` (PCM integer
samples, 8 to 32 bits); resampling is libsoxr's (the `soxr` package), whose
streaming resampler keeps its state across blocks, so block edges leave no
clicks. The header is checked when the file is opened, on the guest's
thread, so a file the source cannot play fails the set-param with a clear
error; decoding runs on the pump's thread.
"""

from __future__ import annotations

import os
import stat
import wave
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

import numpy as np
import soxr  # type: ignore[import-untyped]

from spearpy.audio.params import MicFormat
from spearpy.audio.pcm import Rechunker, remix, to_float, to_pcm16

RAW_SUFFIXES = (".pcm", ".raw")
BLOCK_SECONDS = 0.25  # input read per step: few Python steps, little memory
# A data chunk size streaming writers put when they cannot know the length:
# read such a file to its end instead of calling it truncated.
_STREAMING_SIZES = (0, 0xFFFFFFFF, 0x7FFFFFFF)


class AudioFileError(Exception):
    """The file cannot be played: the message says why, for last_error."""


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
        self._wav: wave.Wave_read | None = None
        if self._path.suffix.lower() in RAW_SUFFIXES:
            self.rate, self.channels, self.sampwidth = fmt.sample_rate_hz, fmt.channels, 2
            self.data_bytes = size
            return
        try:
            wav = wave.open(self._file)  # noqa: SIM115 (closed by close())
        except wave.Error as exc:
            raise AudioFileError(f"{self._path.name} is not a PCM WAV file ({exc}); only "
                                 "integer PCM WAV or raw .pcm/.raw PCM16 is read") from None
        except EOFError:
            raise AudioFileError(f"{self._path.name} is truncated inside its WAV header") \
                from None
        self._wav = wav
        self.rate, self.channels, self.sampwidth = (wav.getframerate(), wav.getnchannels(),
                                                    wav.getsampwidth())
        if not self.rate or not self.channels:
            raise AudioFileError(f"{self._path.name}: a WAV of {self.rate} Hz and "
                                 f"{self.channels} channels has no audio")
        if self.sampwidth not in (1, 2, 3, 4):
            raise AudioFileError(f"{self._path.name}: {self.sampwidth * 8}-bit samples are "
                                 "not supported")
        declared = wav.getnframes() * self.channels * self.sampwidth
        # wave stops right after the data chunk's header: what follows is audio.
        present = size - self._file.tell()
        if declared > present and declared not in _STREAMING_SIZES:
            raise AudioFileError(
                f"{self._path.name} is truncated: its header declares {declared} bytes of "
                f"audio and the file holds {max(present, 0)}")
        self.data_bytes = declared if declared not in _STREAMING_SIZES else present

    def frames(self) -> Iterator[bytes]:
        fmt = self._fmt
        block = self.channels * self.sampwidth
        step = max(1, int(self.rate * BLOCK_SECONDS)) * block
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
        if self._wav is not None:
            self._wav.close()  # does not close a file it was handed
        self._file.close()
