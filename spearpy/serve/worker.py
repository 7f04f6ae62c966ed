"""The far side of the process and Ray executors: a worker's Hosts and its
runs, and the worker process itself (`python -m spearpy.serve.worker
CONFIG_FD TASK_FD RESULT_FD`).

A worker reports each run as messages: ("event", key, Event) as they happen,
then ("end", key, RunResult | None, error text | None). The service encodes,
redacts, stores and streams them as it does its own threads' runs. Started
as a fresh interpreter for the reasons spearpy/batch/worker.py gives.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import signal
import sys
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from multiprocessing.connection import Connection
from typing import Any

from spearpy.batch.worker import read_spec
from spearpy.serve.executors import RunJob

Send = Callable[[tuple[Any, ...]], None]


class WorkerRuns:
    """A worker's Hosts (one per model/backend override, as the service has)
    and the cancel events of its runs."""

    def __init__(self, config: dict[str, Any]) -> None:
        from spearpy.config import HostConfig
        from spearpy.host import Host
        from spearpy.serve.runs import HostPool

        # Every field given explicitly (WorkerSpec's reasoning): the worker
        # builds the service's Host whatever its environment says, except the
        # API key, which it reads from its own environment.
        self.hosts = HostPool(Host(HostConfig(**config)), owned=True)
        self._lock = threading.Lock()
        self._wasm: dict[str, bytes] = {}  # sha256 -> module bytes, sent once
        self._cancels: dict[str, threading.Event] = {}

    def _cancel_event(self, key: str) -> threading.Event:
        with self._lock:
            return self._cancels.setdefault(key, threading.Event())

    def cancel(self, key: str) -> None:
        # Also before the run started here: it then starts cancelled.
        self._cancel_event(key).set()

    def run(self, job: RunJob, wasm: bytes | None, send: Send) -> None:
        cancel = self._cancel_event(job.key)
        try:
            with self._lock:
                if wasm is not None:
                    self._wasm[job.sha256] = wasm
                code = self._wasm[job.sha256]
            host = self.hosts.get(job.model, job.backend)
            module = host.load(code, job.module)
            result = host.run(module, job.args, env=job.env or None, stdin=job.stdin,
                              limits=job.limits or None, capture_output=True, cancel=cancel,
                              on_event=lambda event: send(("event", job.key, event)))
            send(("end", job.key, result, None))
        except Exception as exc:  # before the guest started: the service reports it
            send(("end", job.key, None, f"{type(exc).__name__}: {exc}"))
        finally:
            with self._lock:
                self._cancels.pop(job.key, None)

    def close(self) -> None:
        with self._lock:
            for event in self._cancels.values():
                event.set()
        self.hosts.close(5.0)


def serve(config: dict[str, Any], threads: int, tasks: Connection,
          results: Connection) -> None:
    try:
        runs = WorkerRuns(config)
    except BaseException as exc:
        results.send(("fatal", f"{type(exc).__name__}: {exc}"))
        return
    results.send(("ready", os.getpid()))
    send_lock = threading.Lock()

    def send(message: tuple[Any, ...]) -> None:
        with send_lock, contextlib.suppress(OSError):  # the service is gone: nobody to tell
            results.send(message)

    with ThreadPoolExecutor(threads, thread_name_prefix="spearpy-serve-worker") as pool:
        while True:
            try:
                message = tasks.recv()
            except (EOFError, OSError):
                break  # the service closed the pipe or died
            if message[0] == "run":
                pool.submit(runs.run, message[1], message[2], send)
            elif message[0] == "cancel":
                runs.cancel(message[1])
            else:  # "stop"
                break
        # Runs still going were abandoned by the service: end them now.
        runs.close()


def main(argv: list[str]) -> None:
    # Ctrl-C reaches the whole process group; the service decides what stops.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    config_fd, task_fd, result_fd = argv
    config, threads = pickle.loads(read_spec(int(config_fd)))
    serve(config, threads, Connection(int(task_fd), writable=False),
          Connection(int(result_fd), readable=False))


if __name__ == "__main__":
    main(sys.argv[1:])
