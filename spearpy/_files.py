"""Writing a file so that readers see the old version or the new one, never half.

The bytes go to a temporary file beside the target (same directory, so the
final rename cannot cross file systems), then `os.replace` swaps it in. Any
failure on the way removes the temporary file: a crash of the writer leaves
no 0-byte `.tmp` litter, and an unwritable target raises its OSError.
"""

from __future__ import annotations

import contextlib
import os
import threading
from pathlib import Path


def atomic_write(path: str | os.PathLike[str], data: bytes | bytearray, *,
                 durable: bool = True) -> None:
    """Replace `path` with `data` atomically; durable=True also fsyncs the
    data first, so a power loss cannot leave the new name on empty blocks."""
    target = Path(path)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        with open(tmp, "wb") as handle:
            handle.write(data)
            if durable:
                handle.flush()
                os.fsync(handle.fileno())
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
