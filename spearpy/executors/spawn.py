"""How the process executor (procs.py) starts a worker process, reaps it, and
says how it died. A worker is a fresh interpreter (`python -m MODULE`), not
a fork: the parent runs threads (epoch ticker, HTTP pools) that `fork`
would copy mid-use.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from multiprocessing.connection import Connection
from pathlib import Path


def died(code: int | None) -> str:
    """A worker's exit code (from `reap`) as its lost runs' message says it."""
    if code is not None and code < 0:
        with contextlib.suppress(ValueError):
            return f"was killed by {signal.Signals(-code).name}"
    return f"exited with code {code}"


def spawn_worker(module: str, spec_fd: int
                 ) -> tuple[subprocess.Popen[bytes], Connection, Connection]:
    """`python -m MODULE SPEC_FD TASK_FD RESULT_FD`: the process, the pipe to
    send it tasks and the pipe it answers on."""
    task_r, task_w = os.pipe()
    result_r, result_w = os.pipe()
    try:
        process = subprocess.Popen(
            [sys.executable, "-m", module, str(spec_fd), str(task_r), str(result_w)],
            pass_fds=(spec_fd, task_r, result_w), stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL, env=_worker_env())
    except BaseException:
        for fd in (task_r, task_w, result_r, result_w):
            os.close(fd)
        raise
    # The child holds its own ends: closing ours lets each side see EOF
    # when the other goes away.
    os.close(task_r)
    os.close(result_w)
    return process, Connection(task_w, readable=False), Connection(result_r, writable=False)


def reap(process: subprocess.Popen[bytes], grace: float) -> int | None:
    """Wait for a worker to exit, killing it after `grace` seconds: its exit code."""
    try:
        return process.wait(grace)
    except subprocess.TimeoutExpired:
        process.kill()
        return process.wait()


def _worker_env() -> dict[str, str]:
    """This environment, with spearpy importable even when the embedder put
    it on sys.path by hand rather than installing it."""
    import spearpy

    root = str(Path(spearpy.__file__).resolve().parent.parent)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    return env
