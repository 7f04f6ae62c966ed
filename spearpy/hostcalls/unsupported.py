"""Hostcalls SPEAR has and spearpy does not: linked so such modules instantiate,
answering -38 ENOSYS. Signatures follow SPEAR's spear.h. (User streams are
spearpy.hostcalls.streams.)"""

from __future__ import annotations

from typing import Final

# name -> number of i32 params (all return i32)
UNSUPPORTED: Final[dict[str, int]] = {
    "mic_create": 0,
    "mic_ctl": 4,
    "mic_read": 3,
    "mic_close": 1,
}
