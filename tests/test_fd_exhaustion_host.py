"""A Host whose process has run out of file descriptors fails the run, not
the process (spearpy/wasi_runtime.py): wasmtime creates its WASI I/O runtime
at a process's first guest write, and a panic there (no descriptor for its
epoll) aborted the process with exit 134, taking a whole service with it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

HELLO = Path(__file__).resolve().parent.parent / "wasm-samples" / "c_hello.wasm"

# A fresh process: a Host, its module loaded, then every descriptor but
# FREE taken, then the process's first guest run.
_SCRIPT = """
import os, resource, sys
from spearpy.host import Host
host = Host(cache_dir=None, model="m", base_url="http://127.0.0.1:9/v1")
module = host.load(sys.argv[1])
free = int(sys.argv[2])
resource.setrlimit(resource.RLIMIT_NOFILE, (len(os.listdir("/proc/self/fd")) + 64, 4096))
taken = []
try:
    while True:
        taken.append(os.open(os.devnull, os.O_RDONLY))
except OSError:
    pass
for _ in range(free):
    os.close(taken.pop())
try:
    result = host.run(module)
    print("run", result.outcome, result.message[:80])
except OSError as exc:  # the run's own files could not be made: an error, not a crash
    print("refused", exc.errno)
"""


@pytest.mark.parametrize("free", range(3, 13))
def test_the_first_run_without_descriptors_fails_cleanly(free: int) -> None:
    done = subprocess.run([sys.executable, "-c", _SCRIPT, str(HELLO), str(free)],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr[-800:]
    assert done.stdout.startswith(("run ", "refused ")), done.stdout
