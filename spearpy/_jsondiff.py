"""Where two JSON values first differ: the one wording of every replay's
divergence message (cassette replay, journal replay)."""

from __future__ import annotations

import json
from typing import Any


def first_difference(recorded: Any, got: Any, path: str = "") -> str | None:
    """Where two JSON values first differ, as `path: recorded X, got Y`."""
    here = path or "(root)"
    if type(recorded) is not type(got):
        return f"{here}: recorded {_show(recorded)}, got {_show(got)}"
    if isinstance(recorded, dict):
        for key in recorded:
            if key not in got:
                return f"{path}.{key}: recorded {_show(recorded[key])}, got nothing"
            found = first_difference(recorded[key], got[key], f"{path}.{key}")
            if found is not None:
                return found
        for key in got:
            if key not in recorded:
                return f"{path}.{key}: recorded nothing, got {_show(got[key])}"
        return None
    if isinstance(recorded, list):
        for i, (a, b) in enumerate(zip(recorded, got, strict=False)):
            found = first_difference(a, b, f"{path}[{i}]")
            if found is not None:
                return found
        if len(recorded) != len(got):
            return f"{here}: recorded {len(recorded)} items, got {len(got)}"
        return None
    return None if recorded == got else f"{here}: recorded {_show(recorded)}, got {_show(got)}"


def _show(value: Any, limit: int = 120) -> str:
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return text if len(text) <= limit else text[: limit - 3] + "..."
