"""Which source a mic's params name, opened: SPEAR's `device` and `stub`,
spearpy's `file` and `user_stream`.

`device` reads HostConfig.mic_file instead of a microphone when one is set
(`--mic-file`: how a guest built for a microphone runs on a headless
machine). A device that cannot be opened falls back to the stub when
`fallback.to_stub` (SPEAR's default) and fails the set-param otherwise.
"""

from __future__ import annotations

from pathlib import Path

from spearpy import abi
from spearpy.audio import mounts
from spearpy.audio.device import DeviceSource, DeviceUnavailable
from spearpy.audio.params import MicParams
from spearpy.audio.pump import Source
from spearpy.audio.stub import StubSource
from spearpy.audio.userstream import StreamPuller, open_stream
from spearpy.audio.wavfile import AudioFileError, FileSource
from spearpy.errors import SpearpyError
from spearpy.streams.hub import StreamHub

ENOTCONN = -107  # user_stream_open's answer when no client can reach the run


class SourceError(SpearpyError):
    """The source cannot start: `message` for last_error, `errno` for the guest."""

    def __init__(self, message: str, errno: int) -> None:
        super().__init__(message)
        self.message = message
        self.errno = errno


def open_source(params: MicParams, *, dirs: list[tuple[str, str]], mic_file: Path | None,
                realtime: bool, streams: StreamHub | None) -> Source | StreamPuller:
    fmt = params.fmt
    if params.source == "stub":
        return StubSource(fmt, params.stub_pcm16)
    if params.source == "file":
        try:
            path = mounts.resolve(params.path or "", dirs)
        except mounts.OutsideMounts as exc:
            raise SourceError(f"file source: {exc}", abi.EACCES) from None
        try:
            return FileSource(path, fmt, realtime=realtime)
        except AudioFileError as exc:
            raise SourceError(f"file source: {exc}", abi.EIO) from None
    if params.source == "user_stream":
        try:
            return open_stream(streams, params.stream_id or 0, fmt.frame_bytes)
        except LookupError as exc:
            raise SourceError(f"user_stream source: {exc}", ENOTCONN) from None
    try:
        if mic_file is not None:
            try:
                return FileSource(mic_file, fmt, realtime=realtime)
            except AudioFileError as exc:
                raise DeviceUnavailable(f"--mic-file: {exc}") from None
        return DeviceSource(fmt, params.device_name)
    except DeviceUnavailable as exc:
        if params.fallback_to_stub:
            return StubSource(fmt, params.stub_pcm16)
        raise SourceError(str(exc), abi.EIO) from None
