"""The per-run audio budget: PCM bytes and seconds handed to or taken from
the guest, over every mic and rtasr fd of the run (HostConfig.max_audio_bytes
and max_audio_seconds).

Why a charge that refuses instead of one that ends the run: audio is a
stream the guest can stop and go on without, so running out is an error of
the one call (-EDQUOT, `OVER_BUDGET`), not a reason to kill the guest. The
errno is POSIX's "quota exceeded": SPEAR has no audio limit to copy, and
EDQUOT says what happened (a quota), where ENOSPC already means "your
buffer is too small" in this ABI.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from spearpy.context import RunContext

EDQUOT: Final = -122  # Linux's EDQUOT
OVER_BUDGET: Final = EDQUOT


class AudioBudget:
    """What one run may still move. Thread-safe: an rtasr backend may charge
    from its own thread while the guest reads a mic."""

    __slots__ = ("_lock", "bytes_used", "exceeded", "max_bytes", "max_seconds", "reported",
                 "seconds_used")

    def __init__(self, max_bytes: int, max_seconds: float) -> None:
        self.max_bytes = max_bytes
        self.max_seconds = max_seconds
        self.bytes_used = 0
        self.seconds_used = 0.0
        # The limit that refused the last charge ("max_audio_bytes" or
        # "max_audio_seconds"), None while none has.
        self.exceeded: str | None = None
        self.reported = False  # the limit_hit event went out (once per run)
        self._lock = threading.Lock()

    def charge(self, nbytes: int, seconds: float) -> bool:
        """Count `nbytes` of audio lasting `seconds`, if both fit; False (and
        nothing counted) when either would pass its limit."""
        with self._lock:
            if self.bytes_used + nbytes > self.max_bytes:
                self.exceeded = "max_audio_bytes"
                return False
            # A small tolerance: seconds are sums of float frame durations.
            if self.seconds_used + seconds > self.max_seconds + 1e-9:
                self.exceeded = "max_audio_seconds"
                return False
            self.bytes_used += nbytes
            self.seconds_used += seconds
            return True

    def refund(self, nbytes: int, seconds: float) -> None:
        """Give back a charge whose bytes did not move after all (the guest's
        buffer was too small)."""
        with self._lock:
            self.bytes_used -= nbytes
            self.seconds_used -= seconds

    def limit_value(self) -> float:
        """The configured value of the limit that refused, for its event."""
        return self.max_bytes if self.exceeded == "max_audio_bytes" else self.max_seconds


def audio_budget(run: RunContext) -> AudioBudget:
    """The run's budget, made on first use from its configuration (a run that
    touches no audio never has one)."""
    return run.state(_new_budget)


def _new_budget(run: RunContext) -> AudioBudget:
    return AudioBudget(run.config.max_audio_bytes, run.config.max_audio_seconds)
