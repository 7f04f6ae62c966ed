"""Keeping wasmtime's trap handlers across Ray's driver set-up."""

from __future__ import annotations

import contextlib
import ctypes
import signal
from collections.abc import Iterator

# Signals wasmtime turns into wasm traps (SIGILL: `unreachable` and other
# trap instructions; SIGSEGV/SIGBUS: out-of-bounds accesses; SIGFPE: division).
_TRAP_SIGNALS = (signal.SIGILL, signal.SIGSEGV, signal.SIGBUS, signal.SIGFPE)
# Larger than `struct sigaction` on every libc (glibc x86-64: 152 bytes): the
# saved actions are only handed back to sigaction, never read.
_SIGACTION_BYTES = 1024


@contextlib.contextmanager
def crash_handlers_kept() -> Iterator[None]:
    """Keep this process's handlers for the trap signals across `ray.init`
    (and `ray.shutdown`).

    Ray's driver installs crash reporters for them that do not chain to the
    handlers before them, so once a Host had run here, the next guest trap
    in this process would kill it instead of ending one run.
    """
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        saved = {sig: ctypes.create_string_buffer(_SIGACTION_BYTES) for sig in _TRAP_SIGNALS}
        for sig, buffer in saved.items():
            libc.sigaction(int(sig), None, buffer)
    except (OSError, AttributeError):
        saved = {}  # no sigaction here (not POSIX): nothing to keep
    try:
        yield
    finally:
        for sig, buffer in saved.items():
            libc.sigaction(int(sig), buffer, None)
