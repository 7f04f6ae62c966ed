"""The device source: a real microphone through PortAudio, with the
optional `sounddevice` package (`pip install 'spearpy[audio]'`), imported
only when a guest asks for a device. A machine without it, without
PortAudio or without an input device raises DeviceUnavailable with the
reason; the caller falls back to the stub or fails as SPEAR does."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from spearpy.audio.params import MicFormat
from spearpy.errors import SpearpyError


class DeviceUnavailable(SpearpyError):
    """No microphone can be opened here: the message says why."""


class DeviceSource:
    name = "device"
    paced = False  # the hardware paces the reads
    lossless = False

    def __init__(self, fmt: MicFormat, device_name: str | None) -> None:
        try:
            import sounddevice  # type: ignore[import-not-found, unused-ignore]
        except ImportError:
            raise DeviceUnavailable("device mic unavailable: the sounddevice package is not "
                                    "installed (pip install 'spearpy[audio]'), and no "
                                    "--mic-file was given") from None
        except OSError as exc:  # the package is there, the PortAudio library is not
            raise DeviceUnavailable(f"device mic unavailable: {exc}") from None
        self._samples = fmt.frame_samples
        try:
            self._stream: Any = sounddevice.RawInputStream(
                samplerate=fmt.sample_rate_hz, channels=fmt.channels, dtype="int16",
                blocksize=self._samples, device=device_name)
            self._stream.start()
        except Exception as exc:  # PortAudioError, ValueError for an unknown device
            raise DeviceUnavailable(f"device mic unavailable: {exc}") from None

    def frames(self) -> Iterator[bytes]:
        while True:
            data, _overflowed = self._stream.read(self._samples)
            yield bytes(data)

    def close(self) -> None:
        try:
            self._stream.stop()
        finally:
            self._stream.close()
