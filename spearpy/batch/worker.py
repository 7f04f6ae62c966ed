"""A batch worker process: `python -m spearpy.batch.worker SPEC_FD TASK_FD RESULT_FD`.

Started by ProcessExecutor with a fresh interpreter rather than through
multiprocessing, whose `spawn` re-imports the parent's main script: an
embedder's script without an `if __name__ == "__main__"` guard, or one read
from stdin, would run again in every worker. The worker reads its WorkerSpec
(pickle) from SPEC_FD, an inherited descriptor of a file without a name,
builds a warm Host, then runs what arrives on the task pipe, `spec.threads`
at a time, and sends each result back.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import signal
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from multiprocessing.connection import Connection

from spearpy.batch.jobs import BatchInput, run_job
from spearpy.batch.spec import WorkerSpec


def serve(spec: WorkerSpec, tasks: Connection, results: Connection) -> None:
    try:
        host, module = spec.warm_host()
    except BaseException as exc:
        results.send(("fatal", f"{type(exc).__name__}: {exc}"))
        return
    results.send(("ready", os.getpid(), module.from_disk_cache))
    send_lock = threading.Lock()
    cancel = threading.Event()

    def run(key: int, job: BatchInput, attempt: int) -> None:
        record = run_job(host, module, job, attempt=attempt, cancel=cancel,
                         transcripts=spec.transcripts, settings=spec.settings)
        with send_lock, contextlib.suppress(OSError):  # the parent is gone: nobody to tell
            results.send(("result", key, record))

    with ThreadPoolExecutor(spec.threads, thread_name_prefix="spearpy-batch") as pool:
        while True:
            try:
                message = tasks.recv()
            except (EOFError, OSError):
                break  # the parent closed the pipe (done) or died
            if message[0] == "stop":
                break
            pool.submit(run, *message[1:])
        # Runs still going were abandoned by the parent (stop, or it died):
        # end them now instead of waiting for them on the way out.
        cancel.set()
    host.close()


def read_spec(fd: int) -> bytes:
    """The whole spec file, then the descriptor closed. pread, not read: every
    worker's descriptor shares one file offset with its siblings' and the
    parent's, and workers start concurrently."""
    try:
        size = os.fstat(fd).st_size
        chunks, offset = [], 0
        while offset < size:
            chunk = os.pread(fd, size - offset, offset)
            if not chunk:
                break
            chunks.append(chunk)
            offset += len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def main(argv: list[str]) -> None:
    # Ctrl-C reaches the whole process group; the parent decides what stops.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    spec_fd, task_fd, result_fd = argv
    spec: WorkerSpec = pickle.loads(read_spec(int(spec_fd)))
    serve(spec, Connection(int(task_fd), writable=False),
          Connection(int(result_fd), readable=False))


if __name__ == "__main__":
    main(sys.argv[1:])
