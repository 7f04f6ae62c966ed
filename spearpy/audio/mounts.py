"""Which host file a guest-given path names, if it lies inside the run's
`--dir` mounts: the guest reads nothing through the host that it could not
read through its own WASI view."""

from __future__ import annotations

import os
import posixpath
from pathlib import Path

from spearpy.errors import SpearpyError


class OutsideMounts(SpearpyError, PermissionError):
    """The path is not inside any mount (-EACCES): the message says so."""


def _inside(candidate: str, root: str) -> bool:
    return os.path.commonpath([candidate, root]) == root


def resolve(path: str, dirs: list[tuple[str, str]]) -> Path:
    """The real host path of `path`, a guest path under a mount's guest path
    or a host path under a mount's host path, with symlinks resolved and
    checked to stay inside that mount."""
    if "\x00" in path:
        raise OutsideMounts("the path holds a NUL byte")
    for host, guest in dirs:
        root = os.path.realpath(host)
        candidates = []
        guest_root = posixpath.normpath(guest)
        normal = posixpath.normpath(path)
        if guest_root == "." and not posixpath.isabs(normal):
            candidates.append(os.path.join(root, normal))
        elif normal == guest_root or normal.startswith(guest_root.rstrip("/") + "/"):
            candidates.append(os.path.join(root, posixpath.relpath(normal, guest_root)))
        if os.path.isabs(path):
            candidates.append(path)
        for candidate in candidates:
            real = os.path.realpath(candidate)
            if _inside(real, root):
                return Path(real)
    if not dirs:
        raise OutsideMounts(f"{path!r} is refused: the run mounts no directory (--dir)")
    raise OutsideMounts(f"{path!r} is outside the run's --dir mounts")
