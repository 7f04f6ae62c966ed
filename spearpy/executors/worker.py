"""The far side of the process and Ray executors: a worker's Hosts and its
runs, and the worker process itself (`python -m spearpy.executors.worker
SPEC_FD TASK_FD RESULT_FD`).

A worker reports each run as messages: ("loaded", key, from_disk_cache) the
first time it loads the run's module, ("event", key, Event) as they happen
(if asked to), then ("end", key, RunResult | None, error text | None); and
("pong",) to each ("ping",).

Started as a fresh interpreter rather than through multiprocessing, whose
`spawn` re-imports the parent's main script: an embedder's script without an
`if __name__ == "__main__"` guard, or one read from stdin, would run again in
every worker. The spec (the Host's configuration and how many runs at once)
comes from SPEC_FD, an inherited descriptor of a file without a name.
"""

from __future__ import annotations

import os
import pickle
import signal
import sys
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from multiprocessing.connection import Connection
from typing import Any

from spearpy.executors.base import RunJob, run_on

Send = Callable[[tuple[Any, ...]], None]


class WorkerRuns:
    """A worker's Hosts (one per model/backend override, as the service has)
    and the cancel events of its runs."""

    def __init__(self, config: dict[str, Any]) -> None:
        from spearpy.config import HostConfig
        from spearpy.executors.hosts import HostPool
        from spearpy.host import Host

        # Every field given explicitly: the worker builds the caller's Host
        # whatever its own environment says (SPEARPY_*, OPENAI_BASE_URL),
        # except the API key, which it reads from its own environment.
        self.hosts = HostPool(Host(HostConfig(**config)), owned=True)
        self._lock = threading.Lock()
        self._wasm: dict[str, bytes] = {}  # sha256 -> module bytes, sent once
        self._loaded: set[tuple[str, str | None, str | None]] = set()
        self._cancels: dict[str, threading.Event] = {}

    def _cancel_event(self, key: str) -> threading.Event:
        with self._lock:
            return self._cancels.setdefault(key, threading.Event())

    def cancel(self, key: str) -> None:
        # Also before the run started here: it then starts cancelled.
        self._cancel_event(key).set()

    def run(self, job: RunJob, wasm: bytes | None, stream: bool, send: Send) -> None:
        cancel = self._cancel_event(job.key)
        try:
            with self._lock:
                if wasm is not None:
                    self._wasm[job.sha256] = wasm
                code = self._wasm[job.sha256]
            host = self.hosts.get(job.model, job.backend)
            module = host.load(code, job.module)
            where = (job.sha256, job.model, job.backend)
            with self._lock:
                first = where not in self._loaded
                self._loaded.add(where)
            if first:
                send(("loaded", job.key, module.from_disk_cache))
            on_event = (lambda event: send(("event", job.key, event))) if stream else None
            send(("end", job.key, run_on(host, module, job, cancel, on_event), None))
        except Exception as exc:  # before the guest started: the caller reports it
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
    send = _Combined(results)

    with ThreadPoolExecutor(threads, thread_name_prefix="spearpy-worker") as pool:
        while True:
            try:
                message = tasks.recv()
            except (EOFError, OSError):
                # The parent died (it says "stop" before it closes the pipe).
                # Go as a crash goes: cancelling the runs would end their
                # journals as `cancelled`, and the parent's successor (a
                # restarted `spearpy serve`) could not resume them. Their
                # scratch directories go, though: nobody else would remove them.
                from spearpy.scratch import remove_all

                remove_all()
                os._exit(0)
            if message[0] == "run":
                pool.submit(runs.run, message[1], message[2], message[3], send)
            elif message[0] == "cancel":
                runs.cancel(message[1])
            elif message[0] == "ping":
                # From this thread, not the runs': the parent's watch asks
                # whether the worker answers at all (procs_watch.py).
                send(("pong",))
            else:  # "stop"
                break
        # Runs still going were abandoned by the parent: end them now
        # instead of waiting for them on the way out.
        runs.close()


# Messages left for the writer at most: past this, a run's thread waits to
# write instead (as each did before messages were combined), so a parent
# reading slower than guests make events holds the guests, not the worker's
# memory (a guest opening and closing a microphone in a loop makes an event
# each time, without end).
_MAX_PENDING = 256


class _Combined:
    """The runs' messages to the parent, several to a write when they come
    together: a thread that finds another one writing leaves its message for
    that one to send next, in order, as one ("batch", [...]) message. One
    pickle and one write per event, each taking the GIL back from 32 run
    threads, was the worker's and the parent's reader's largest cost after
    the runs themselves (bench SV, the processes executor). At most about
    `_MAX_PENDING` wait: then the thread waits for the writer's lock."""

    def __init__(self, results: Connection) -> None:
        self._results = results
        self._pending: list[tuple[Any, ...]] = []
        self._pending_lock = threading.Lock()
        self._send_lock = threading.Lock()

    def __call__(self, message: tuple[Any, ...]) -> None:
        with self._pending_lock:
            self._pending.append(message)
            wait = len(self._pending) > _MAX_PENDING
        # A writer checks for more after it lets go, so a message left while
        # it wrote is never stranded.
        while self._send_lock.acquire(blocking=wait):
            wait = False
            try:
                with self._pending_lock:
                    batch, self._pending = self._pending, []
                if batch:
                    self._write(batch)
            finally:
                self._send_lock.release()
            with self._pending_lock:
                if not self._pending:
                    return

    def _write(self, batch: list[tuple[Any, ...]]) -> None:
        try:
            self._results.send(batch[0] if len(batch) == 1 else ("batch", batch))
        except OSError:
            return  # the parent is gone: nobody to tell
        except Exception as exc:
            # A message that does not pickle (nothing was written: send
            # pickles first) must not take the others with it: each alone,
            # and a run end that does not pickle becomes its run's error.
            if len(batch) > 1:
                for message in batch:
                    self._write([message])
                return
            message = batch[0]
            if message[0] == "end" and message[3] is None:
                self._write([("end", message[1], None,
                              f"its result could not be sent: {type(exc).__name__}: "
                              f"{str(exc)[:500]}")])  # an error about the run's own objects


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
    config, threads = pickle.loads(read_spec(int(spec_fd)))
    serve(config, threads, Connection(int(task_fd), writable=False),
          Connection(int(result_fd), readable=False))


if __name__ == "__main__":
    main(sys.argv[1:])
