"""rtasr autoflush settings (rtasr_ctl 7 / 8), parsed as SPEAR's host does.

Two spellings are accepted, like SPEAR: the current one
`{"strategy": "server_vad"|"client_commit"|"manual"|"off", "vad": {...},
"client_commit": {...}, "flush_on_close": bool}` and the older
`{"enabled": bool, "mode": "off"|"silence"|"time"|"bytes"|..., ...}`.
An unknown strategy or a `vad` / `client_commit` that is not an object is
-EINVAL; a missing number takes SPEAR's default.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from spearpy.errors import SpearpyError

MANUAL, SERVER_VAD, CLIENT_COMMIT = "manual", "server_vad", "client_commit"
_STRATEGIES = {"manual": MANUAL, "off": MANUAL, "server_vad": SERVER_VAD,
               "client_commit": CLIENT_COMMIT}
DEFAULT_SILENCE_MS = 500
DEFAULT_THRESHOLD = 0.5
DEFAULT_PREFIX_PADDING_MS = 300
DEFAULT_MIN_FLUSH_GAP_MS = 500


class SegmentationError(SpearpyError, ValueError):
    """The autoflush JSON is not one SPEAR accepts (the ctl returns -EINVAL)."""


@dataclass(frozen=True, slots=True)
class Vad:
    silence_ms: int = DEFAULT_SILENCE_MS
    threshold: float | None = None
    prefix_padding_ms: int | None = None


@dataclass(frozen=True, slots=True)
class ClientCommit:
    flush_interval_ms: int | None = None
    max_buffer_bytes: int | None = None
    silence_ms: int | None = None
    min_flush_gap_ms: int = DEFAULT_MIN_FLUSH_GAP_MS


@dataclass(frozen=True, slots=True)
class Segmentation:
    strategy: str = SERVER_VAD
    vad: Vad | None = field(default_factory=Vad)
    client_commit: ClientCommit | None = None
    flush_on_close: bool = False

    def to_json(self) -> dict[str, Any]:
        vad: dict[str, Any] | None = None
        if self.vad is not None:
            vad = {"silence_ms": self.vad.silence_ms}
            if self.vad.threshold is not None:
                vad["threshold"] = self.vad.threshold
            if self.vad.prefix_padding_ms is not None:
                vad["prefix_padding_ms"] = self.vad.prefix_padding_ms
        commit = None
        if self.client_commit is not None:
            c = self.client_commit
            commit = {"flush_interval_ms": c.flush_interval_ms,
                      "max_buffer_bytes": c.max_buffer_bytes, "silence_ms": c.silence_ms,
                      "min_flush_gap_ms": c.min_flush_gap_ms}
        return {"strategy": self.strategy, "flush_on_close": self.flush_on_close,
                "vad": vad, "client_commit": commit}

    def turn_detection(self) -> dict[str, Any] | None:
        """The session's `turn_detection`: the server's VAD, or None (off)."""
        if self.strategy != SERVER_VAD:
            return None
        vad = self.vad or Vad()
        return {"type": "server_vad",
                "threshold": DEFAULT_THRESHOLD if vad.threshold is None else vad.threshold,
                "prefix_padding_ms": (DEFAULT_PREFIX_PADDING_MS if vad.prefix_padding_ms is None
                                      else vad.prefix_padding_ms),
                "silence_duration_ms": vad.silence_ms}


def _uint(obj: dict[str, Any], key: str) -> int | None:
    value = obj.get(key)
    # JSON's unsigned integers only, as serde's as_u64 (a bool is no number).
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    return None


def _float(obj: dict[str, Any], key: str) -> float | None:
    value = obj.get(key)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    return None


def _object(value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise SegmentationError("expected a JSON object")
    return value


def parse(value: Any) -> Segmentation:
    obj = _object(value)
    flush_on_close = obj.get("flush_on_close") is True
    strategy_name = obj.get("strategy")
    if isinstance(strategy_name, str):
        strategy = _STRATEGIES.get(strategy_name)
        if strategy is None:
            raise SegmentationError(f"unknown strategy {strategy_name!r}")
        vad = None
        if "vad" in obj:
            v = _object(obj["vad"])
            silence = _uint(v, "silence_ms")
            vad = Vad(silence_ms=DEFAULT_SILENCE_MS if silence is None else silence,
                      threshold=_float(v, "threshold"),
                      prefix_padding_ms=_uint(v, "prefix_padding_ms"))
        commit = None
        if "client_commit" in obj:
            commit = _client_commit(_object(obj["client_commit"]), "hybrid")
        return Segmentation(strategy, vad, commit, flush_on_close)
    return _legacy(obj, flush_on_close)


def _client_commit(obj: dict[str, Any], mode: str) -> ClientCommit:
    gap = _uint(obj, "min_flush_gap_ms")
    return ClientCommit(
        flush_interval_ms=None if mode == "bytes" else _uint(obj, "flush_interval_ms"),
        max_buffer_bytes=None if mode == "time" else _uint(obj, "max_buffer_bytes"),
        silence_ms=None if mode in ("bytes", "time") else _uint(obj, "silence_ms"),
        min_flush_gap_ms=DEFAULT_MIN_FLUSH_GAP_MS if gap is None else gap)


def _legacy(obj: dict[str, Any], flush_on_close: bool) -> Segmentation:
    mode = obj.get("mode") if isinstance(obj.get("mode"), str) else "off"
    if obj.get("enabled") is not True or mode == "off":
        return Segmentation(MANUAL, None, None, flush_on_close)
    if mode == "silence":
        silence = _uint(obj, "silence_ms")
        if silence is None:
            silence = _uint(obj, "flush_interval_ms")
        return Segmentation(SERVER_VAD, Vad(DEFAULT_SILENCE_MS if silence is None else silence,
                                            DEFAULT_THRESHOLD, DEFAULT_PREFIX_PADDING_MS),
                            None, flush_on_close)
    return Segmentation(CLIENT_COMMIT, None, _client_commit(obj, str(mode)), flush_on_close)
