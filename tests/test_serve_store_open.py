"""A state directory the run store cannot open (its database damaged, its
tables refused) is let go of: the error is the database's, and once the
operator repaired it the next open in the same process works instead of
reporting another service there."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import pytest

from spearpy.serve.store import RunStore


def test_a_store_that_fails_to_open_lets_go_of_the_state_directory(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    (state / "runs.sqlite3").write_bytes(b"not a database, not even its header" * 64)
    with pytest.raises(sqlite3.DatabaseError):
        RunStore(state)
    assert _open_fds(state) == []
    (state / "runs.sqlite3").unlink()  # repaired: a fresh one
    store = RunStore(state)
    try:
        assert store.list_runs(10) == ([], False)
    finally:
        store.close()


def _open_fds(directory: Path) -> list[str]:
    """This process's descriptors on files in `directory`."""
    found = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:  # the listing's own descriptor, closed meanwhile
            continue
        if target.startswith(f"{directory}/"):
            found.append(target)
    return found
