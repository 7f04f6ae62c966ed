"""How much one run's user streams may hold, and SPEAR's constants for them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

# user_stream_open directions (client -> guest, guest -> client, both).
DIR_IN: Final = 1
DIR_OUT: Final = 2
DIR_BIDI: Final = 3
# user_stream_ctl_read event kinds (SPEAR's spear.h).
CTL_STREAM_CONNECTED: Final = 1
CTL_SESSION_CLOSED: Final = 2
CTL_EVENT_BYTES: Final = 8

# errno values SPEAR uses for streams beyond spearpy.abi's (returned negated).
EPIPE: Final = -32
ECONNRESET: Final = -104
ENOTCONN: Final = -107


@dataclass(frozen=True, slots=True)
class StreamLimits:
    """Per run. Every queue is bounded twice (frames and bytes), per stream and
    per direction, so the most a run's streams hold is about
    `max_streams * 2 * max_queue_bytes` (32 MiB by default), whatever a
    client sends or a guest writes."""

    max_frame_bytes: int = 1 << 20  # one SSF frame, header included
    max_queue_bytes: int = 1 << 20  # per stream, per direction
    max_queue_frames: int = 256  # per stream, per direction
    max_streams: int = 16  # stream ids per client session
    max_ctl_events: int = 1024  # unread control events per ctl fd (oldest dropped past it)

    def __post_init__(self) -> None:
        for name in ("max_frame_bytes", "max_queue_bytes", "max_queue_frames", "max_streams",
                     "max_ctl_events"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1")
        if self.max_frame_bytes < 32:
            raise ValueError("max_frame_bytes must hold at least the 32-byte SSF header")
        if self.max_queue_bytes < self.max_frame_bytes:
            # A frame the queue could never take would stall its stream forever.
            raise ValueError("max_queue_bytes must be at least max_frame_bytes")
