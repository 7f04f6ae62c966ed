"""The rtasr_* family (SPEAR's realtime speech recognition fds). Filled in by
the audio work; until then these names answer -38 ENOSYS."""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

# name -> (number of i32 params, implementation); all return i32.
RTASR_HOSTCALLS: Final[dict[str, tuple[int, Callable[..., int]]]] = {}
