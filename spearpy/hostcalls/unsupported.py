"""Hostcalls SPEAR has and spearpy does not: linked so such modules instantiate,
answering -38 ENOSYS. Signatures follow SPEAR's spear.h.

Empty now: every family SPEAR's header declares is implemented (user streams
in spearpy.hostcalls.streams, the microphone in .mic, realtime speech
recognition in .rtasr). A family SPEAR adds goes here first, so modules
using it load and `spearpy inspect` reports it."""

from __future__ import annotations

from typing import Final

# name -> number of i32 params (all return i32)
UNSUPPORTED: Final[dict[str, int]] = {}
