"""PCM arithmetic: integer samples to float and back, channel mixing, and
cutting a byte stream into whole frames."""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

Samples = npt.NDArray[np.float32]  # shape (frames, channels), in [-1, 1]


def to_float(raw: bytes, sampwidth: int, channels: int) -> Samples:
    """Interleaved little-endian PCM (WAV's: 8-bit unsigned, 16/24/32-bit
    signed) as float32 of shape (frames, channels)."""
    usable = len(raw) - len(raw) % (sampwidth * channels)
    data = memoryview(raw)[:usable]
    ints: npt.NDArray[Any]
    if sampwidth == 1:
        ints = np.frombuffer(data, dtype=np.uint8).astype(np.float32) - 128.0
        scale = 128.0
    elif sampwidth == 2:
        ints = np.frombuffer(data, dtype="<i2").astype(np.float32)
        scale = 32768.0
    elif sampwidth == 3:
        # No 24-bit dtype: place the three bytes in the top of an int32.
        b = np.frombuffer(data, dtype=np.uint8).reshape(-1, 3).astype(np.int32)
        ints = ((b[:, 0] << 8) | (b[:, 1] << 16) | (b[:, 2] << 24)).astype(np.float32)
        scale = 2147483648.0
    elif sampwidth == 4:
        ints = np.frombuffer(data, dtype="<i4").astype(np.float32)
        scale = 2147483648.0
    else:
        raise ValueError(f"{sampwidth * 8}-bit samples are not supported")
    out: Samples = (ints / scale).astype(np.float32).reshape(-1, channels)
    return out


def remix(samples: Samples, channels: int) -> Samples:
    """The same audio with `channels` channels: equal channel counts pass,
    anything else goes through the mono mix (as SPEAR's device source does)."""
    if samples.shape[1] == channels:
        return samples
    mono = samples.mean(axis=1, dtype=np.float32, keepdims=True)
    return mono if channels == 1 else np.repeat(mono, channels, axis=1)


def to_pcm16(samples: Samples) -> bytes:
    """The inverse of to_float's scale, so 16-bit samples come back exact."""
    scaled = np.clip(np.rint(samples * 32768.0), -32768.0, 32767.0)
    pcm: bytes = scaled.astype("<i2").tobytes()
    return pcm


class Rechunker:
    """Bytes in, whole frames of `frame_bytes` out; the tail waits for more."""

    __slots__ = ("_pending", "frame_bytes")

    def __init__(self, frame_bytes: int) -> None:
        self.frame_bytes = frame_bytes
        self._pending = bytearray()

    def feed(self, data: bytes) -> list[bytes]:
        self._pending += data
        size = self.frame_bytes
        whole = len(self._pending) // size * size
        if not whole:
            return []
        frames = [bytes(self._pending[i:i + size]) for i in range(0, whole, size)]
        del self._pending[:whole]
        return frames

    @property
    def pending(self) -> int:
        return len(self._pending)

    def flush(self) -> bytes | None:
        """The tail as a last frame padded with silence, or None if empty: a
        guest sized for whole frames gets whole frames to the end."""
        if not self._pending:
            return None
        frame = bytes(self._pending) + bytes(self.frame_bytes - len(self._pending))
        self._pending.clear()
        return frame
