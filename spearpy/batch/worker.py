"""A batch worker process: `python -m spearpy.batch.worker SPEC_FILE TASK_FD RESULT_FD`.

Started by ProcessExecutor with a fresh interpreter rather than through
multiprocessing, whose `spawn` re-imports the parent's main script: an
embedder's script without an `if __name__ == "__main__"` guard, or one read
from stdin, would run again in every worker. The worker reads its WorkerSpec
from SPEC_FILE (pickle), builds a warm Host, then runs what arrives on the
task pipe, `spec.threads` at a time, and sends each result back.
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
                         transcripts=spec.transcripts)
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


def main(argv: list[str]) -> None:
    # Ctrl-C reaches the whole process group; the parent decides what stops.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    spec_file, task_fd, result_fd = argv
    with open(spec_file, "rb") as handle:
        spec: WorkerSpec = pickle.load(handle)
    serve(spec, Connection(int(task_fd), writable=False),
          Connection(int(result_fd), readable=False))


if __name__ == "__main__":
    main(sys.argv[1:])
