"""The mic_* family (SPEAR's microphone fds). Filled in by the audio work;
until then these names answer -38 ENOSYS from hostcalls.unsupported."""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

# name -> (number of i32 params, implementation); all return i32.
MIC_HOSTCALLS: Final[dict[str, tuple[int, Callable[..., int]]]] = {}
