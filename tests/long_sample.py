"""The long profile's sample in every suite (tests/conftest.py calls this).

Tests marked `long` (the full hostile-upstream fault matrix, the 10^5-call
fuzz) are deselected by default (`-m 'not long'` in pyproject.toml) and run
by tools/long_profile.sh. So that CI still exercises them, a fixed-seed
sample of each parametrized `long` test loses its `long` mark and gains
`long_sample`: the default suite runs it, the same items every time, and a
failure names an item anyone can rerun. A `long` test without parameters
(the long fuzz) has no sample: its CI profile is a separate, shorter test.

SPEARPY_LONG=1 (tools/long_profile.sh sets it), or any `-m` but the
default and one naming long_sample, leaves every mark as it is;
SPEARPY_LONG_SAMPLE (items per test, default 32) and SPEARPY_LONG_SEED
change the sample.
"""

from __future__ import annotations

import os
import random
from collections import defaultdict

import pytest

DEFAULT_SIZE = 32
DEFAULT_SEED = 34  # issue 34, which asked for it; any fixed value will do


def sample_long_items(markexpr: str, items: list[pytest.Item]) -> list[pytest.Item]:
    """Move the sample out of the `long` profile; returns the sampled items.
    Only under the default `-m 'not long'` (or an expression naming
    long_sample): `pytest -m long` and `-m "long or not long"` get every
    long item as before."""
    if os.environ.get("SPEARPY_LONG") == "1" or not (
            markexpr.strip() == "not long" or "long_sample" in markexpr):
        return []
    size = int(os.environ.get("SPEARPY_LONG_SAMPLE", DEFAULT_SIZE))
    seed = int(os.environ.get("SPEARPY_LONG_SEED", DEFAULT_SEED))
    by_test: dict[str, list[pytest.Item]] = defaultdict(list)
    for item in items:
        if item.get_closest_marker("long") is not None and \
                getattr(item, "callspec", None) is not None:
            by_test[item.nodeid.split("[", 1)[0]].append(item)
    sampled: list[pytest.Item] = []
    for test, group in sorted(by_test.items()):
        sampled += _sample(group, size, random.Random(f"{seed}:{test}"))
    for item in sampled:
        item.own_markers = [m for m in item.own_markers if m.name != "long"]
        item.add_marker(pytest.mark.long_sample)
    return sampled


def _sample(group: list[pytest.Item], size: int, rng: random.Random) -> list[pytest.Item]:
    """`size` items (more if needed) in which every value of every parameter
    appears: each fault of the matrix at least once. Shuffled from sorted
    ids: the same items whatever else was collected, or in which order."""
    pool = sorted(group, key=lambda item: item.nodeid)
    rng.shuffle(pool)
    chosen: list[pytest.Item] = []
    seen: set[tuple[str, str]] = set()
    for item in pool:
        values = {(name, repr(value)) for name, value in item.callspec.params.items()}  # type: ignore[attr-defined]
        if not values <= seen:
            chosen.append(item)
            seen |= values
    rest = [item for item in pool if item not in chosen]
    return chosen + rest[:max(0, size - len(chosen))]
