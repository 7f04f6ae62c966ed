"""SPEAR's stub source: silence, or the given PCM16 bytes looped, one frame
every frame_ms for as long as the mic runs."""

from __future__ import annotations

from collections.abc import Iterator

from spearpy.audio.params import MicFormat


class StubSource:
    name = "stub"
    paced = True
    lossless = False

    def __init__(self, fmt: MicFormat, pcm: bytes | None) -> None:
        self._size = fmt.frame_bytes
        self._pcm = pcm or b""

    def frames(self) -> Iterator[bytes]:
        size, pcm = self._size, self._pcm
        if not pcm:
            silence = bytes(size)
            while True:
                yield silence
        offset = 0
        # Enough copies that any frame is one slice, wherever the loop is.
        looped = pcm * (size // len(pcm) + 2)
        while True:
            yield looped[offset:offset + size]
            offset = (offset + size) % len(pcm)

    def close(self) -> None:
        pass
