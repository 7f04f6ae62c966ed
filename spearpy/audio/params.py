"""A mic's set-param JSON (SPEAR's mic_ctl cmd 1), read as SPEAR's host reads
it, plus spearpy's own sources.

SPEAR's keys and defaults: `sample_rate_hz` 24000, `channels` 1, `frame_ms`
20, `format` "pcm16", `source` "device", `device.name`, `max_queue_bytes`
(512 KiB until set), `fallback.to_stub` true, `stub_pcm16_base64` (at most
10 MiB decoded). A nested object (`{"device": {"name": ..}}`) and a dotted
key (`"device.name"`) are both read. As on SPEAR, a number of the wrong JSON
type leaves its default; unlike SPEAR, values no microphone has (0 Hz, 100
channels, a 10 s frame) and a format other than pcm16 are refused, because
they would make frames of any size the guest likes.

spearpy's sources and their keys:
- `"source": "file"`, `"path"`: a WAV (PCM 8/16/24/32-bit) or raw `.pcm`/
  `.raw` file (PCM16 LE at the requested rate and channels), given as a path
  inside one of the run's `--dir` mounts, guest path or host path.
- `"source": "user_stream"`, `"stream_id"`: the data of the frames the
  running client sends on that user stream (u32 id) are PCM16 LE at the
  requested rate and channels, cut into frames of `frame_ms`.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass
from typing import Any, Final

from spearpy.errors import SpearpyError

SOURCES: Final = ("device", "stub", "file", "user_stream")
DEFAULT_MAX_QUEUE_BYTES: Final = 512 * 1024
MAX_STUB_BYTES: Final = 10 * 1024 * 1024  # SPEAR's bound on stub_pcm16_base64
MAX_SAMPLE_RATE: Final = 384_000
MAX_CHANNELS: Final = 8
MAX_FRAME_MS: Final = 1000


class ParamError(SpearpyError, ValueError):
    """The set-param JSON cannot configure a mic (-EINVAL)."""


@dataclass(frozen=True, slots=True)
class MicFormat:
    sample_rate_hz: int = 24000
    channels: int = 1
    frame_ms: int = 20
    format: str = "pcm16"

    @property
    def frame_samples(self) -> int:
        """Samples per channel in one frame (SPEAR's integer arithmetic)."""
        return self.sample_rate_hz * self.frame_ms // 1000

    @property
    def frame_bytes(self) -> int:
        return self.frame_samples * self.channels * 2

    @property
    def bytes_per_second(self) -> int:
        return self.sample_rate_hz * self.channels * 2

    def seconds(self, nbytes: int) -> float:
        return nbytes / self.bytes_per_second

    def as_json(self) -> dict[str, Any]:
        return {"sample_rate_hz": self.sample_rate_hz, "channels": self.channels,
                "frame_ms": self.frame_ms, "format": self.format}


@dataclass(frozen=True, slots=True)
class MicParams:
    fmt: MicFormat
    source: str = "device"
    device_name: str | None = None
    max_queue_bytes: int | None = None
    fallback_to_stub: bool = True
    stub_pcm16: bytes | None = None
    path: str | None = None
    stream_id: int | None = None


def _nested(obj: dict[str, Any], outer: str, inner: str) -> Any:
    value = obj.get(outer)
    if isinstance(value, dict) and inner in value:
        return value[inner]
    return obj.get(f"{outer}.{inner}")


def _uint(value: Any, default: int) -> int:
    # serde_json's as_u64: a non-negative integer, anything else is "absent".
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        return default
    return value


def _within(name: str, value: int, low: int, high: int) -> int:
    if not low <= value <= high:
        raise ParamError(f"{name} {value} is outside [{low}, {high}]")
    return value


def parse(obj: Any) -> MicParams:
    """The params of one set-param call; ParamError for what cannot be used."""
    if not isinstance(obj, dict):
        raise ParamError("the mic params must be a JSON object")
    fmt_name = obj.get("format")
    fmt = MicFormat(
        sample_rate_hz=_within("sample_rate_hz", _uint(obj.get("sample_rate_hz"), 24000),
                               1000, MAX_SAMPLE_RATE),
        channels=_within("channels", _uint(obj.get("channels"), 1), 1, MAX_CHANNELS),
        frame_ms=_within("frame_ms", _uint(obj.get("frame_ms"), 20), 1, MAX_FRAME_MS),
        format=fmt_name if isinstance(fmt_name, str) else "pcm16")
    if fmt.format != "pcm16":
        raise ParamError(f"unsupported format: {fmt.format} (only pcm16)")
    source = obj.get("source")
    source = source if isinstance(source, str) else "device"
    if source not in SOURCES:
        raise ParamError(f"unknown source {source!r}; known: {', '.join(SOURCES)}")
    name = _nested(obj, "device", "name")
    to_stub = _nested(obj, "fallback", "to_stub")
    raw_queue = obj.get("max_queue_bytes")
    stub = obj.get("stub_pcm16_base64")
    path = obj.get("path")
    stream_id = obj.get("stream_id")
    if source == "file" and not isinstance(path, str):
        raise ParamError("the file source needs \"path\" (a string)")
    if source == "user_stream" and (isinstance(stream_id, bool) or not isinstance(
            stream_id, int) or not 0 <= stream_id <= 0xFFFFFFFF):
        raise ParamError("the user_stream source needs \"stream_id\" (a u32)")
    return MicParams(
        fmt=fmt, source=source, device_name=name if isinstance(name, str) else None,
        max_queue_bytes=_uint(raw_queue, -1) if _uint(raw_queue, -1) >= 0 else None,
        fallback_to_stub=to_stub if isinstance(to_stub, bool) else True,
        stub_pcm16=_stub_bytes(stub) if isinstance(stub, str) else None,
        path=path if isinstance(path, str) else None,
        stream_id=stream_id if isinstance(stream_id, int) else None)


def _stub_bytes(text: str) -> bytes:
    try:
        data = base64.b64decode(text.strip(), validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ParamError(f"stub_pcm16_base64 is not base64: {exc}") from None
    if len(data) > MAX_STUB_BYTES:
        raise ParamError(f"stub_pcm16_base64 decodes to {len(data)} bytes; at most "
                         f"{MAX_STUB_BYTES}")
    return data
