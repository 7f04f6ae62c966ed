"""A run's private scratch directory (its capture FIFOs and stdin file),
placed where making and removing it is cheapest."""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path


def _scratch_root() -> str | None:
    """Where runs make their scratch directories (the capture FIFOs, a stdin
    file): a tmpfs when the system has one and temporary files go to the
    default /tmp (neither TMPDIR nor `tempfile.tempdir` chose a place). On a
    disk filesystem the directory and its two FIFOs cost ~2 ms CPU and up to
    ~6 ms wall per run (journal updates; measured on ext4), more than ten
    loopback completions, and 32 runs starting at once queue on them; on
    tmpfs ~0.1 ms. None: tempfile's choice."""
    return _tmpfs() if tempfile.gettempdir() == "/tmp" else None


@functools.cache
def _tmpfs() -> str | None:
    shm = "/dev/shm"
    return shm if os.path.isdir(shm) and os.access(shm, os.W_OK | os.X_OK) else None


# What runs put in their scratch directory (stdin's file, the capture FIFOs).
_SCRATCH_FILES = ("stdin", "stdout", "stderr")
# The directories of the runs in progress in this process, for a process
# that must end at once (remove_all) without leaving them behind.
_LIVE: set[str] = set()


@contextlib.contextmanager
def scratch_dir(run_id: str) -> Iterator[Path]:
    """A private directory for one run, named after it (the id is random) and
    removed by unlinking what runs put there: `TemporaryDirectory` spent
    ~90 us of a ~700 us run start on a random name and `shutil.rmtree`.
    Anything unexpected inside still goes, through rmtree."""
    root = _scratch_root() or tempfile.gettempdir()
    path = os.path.join(root, f"spearpy-{run_id}")
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        path = tempfile.mkdtemp(prefix="spearpy-", dir=root)
    _LIVE.add(path)
    try:
        yield Path(path)
    finally:
        _remove(path)
        _LIVE.discard(path)


def _remove(path: str) -> None:
    for name in _SCRATCH_FILES:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(os.path.join(path, name))
    try:
        os.rmdir(path)
    except OSError:
        shutil.rmtree(path, ignore_errors=True)


def remove_all() -> None:
    """Remove every run's scratch directory now: for a worker process that
    exits at once, as a crash would, leaving its runs' journals to be
    resumed (executors/worker.py), but not their directories behind."""
    for path in list(_LIVE):
        _remove(path)
