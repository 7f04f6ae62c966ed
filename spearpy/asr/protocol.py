"""The OpenAI-compatible realtime transcription protocol, as SPEAR's
`openai_realtime_ws` backend speaks it: one `session.update` (pcm16 input,
the transcription model, the turn detection of the fd's autoflush), then
`input_audio_buffer.append` with base64 audio, `.commit` on flush and
`.clear`. What the server sends back (transcription deltas and completions,
`error`, anything else) goes to the guest as it came, one message per event.
"""

from __future__ import annotations

import base64
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from spearpy import _json
from spearpy.asr.segmentation import Segmentation

DEFAULT_MODEL = "gpt-4o-mini-transcribe"
# OpenAI's pcm16: 16-bit little-endian mono at 24 kHz.
SAMPLE_RATE_HZ = 24000
BYTES_PER_SECOND = SAMPLE_RATE_HZ * 2
COMMIT = _json.compact_bytes({"type": "input_audio_buffer.commit"}).decode()
CLEAR = _json.compact_bytes({"type": "input_audio_buffer.clear"}).decode()


def session_update(model: str, segmentation: Segmentation) -> str:
    return _json.compact_bytes({"type": "session.update", "session": {
        "input_audio_format": "pcm16",
        "input_audio_transcription": {"model": model},
        "turn_detection": segmentation.turn_detection(),
    }}).decode()


def append(audio: bytes) -> str:
    return ('{"type":"input_audio_buffer.append","audio":"'
            + base64.b64encode(audio).decode("ascii") + '"}')


def ws_url_problem(url: str) -> str | None:
    """Why `url` cannot be the realtime WebSocket URL, or None."""
    try:
        parts = urlsplit(url)
        port_ok = parts.port is None or parts.port > 0
    except ValueError as exc:
        return f"not a URL ({exc})"
    if parts.scheme not in ("ws", "wss") or not parts.hostname:
        return ("must be a ws:// or wss:// URL with a host, like "
                "wss://api.openai.com/v1/realtime?intent=transcription")
    if not port_ok:
        return "port 0 cannot be connected to"
    if any(ch.isspace() for ch in url):
        return "must not contain whitespace"
    return None


def derive_url(base_url: str) -> str:
    """The realtime URL of an OpenAI-compatible HTTP base URL: https -> wss,
    http -> ws, `/realtime?intent=transcription` under its `/v1`."""
    parts = urlsplit(base_url)
    scheme = {"https": "wss", "http": "ws"}.get(parts.scheme, parts.scheme)
    path = parts.path.rstrip("/")
    if not path.endswith("/v1"):
        path += "/v1"
    return urlunsplit((scheme, parts.netloc, path + "/realtime", "intent=transcription", ""))


def event_type(event: Any) -> str:
    if isinstance(event, dict) and isinstance(event.get("type"), str):
        return str(event["type"])
    return ""
