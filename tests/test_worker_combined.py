"""A worker's messages to its parent (executors/worker.py _Combined): from
many run threads at once, every message arrives, each thread's in order,
several to a write when they come together; the parent (procs.py) takes a
batch apart in order."""

from __future__ import annotations

import threading
from multiprocessing import Pipe
from typing import Any

from spearpy.executors.worker import _Combined


def test_messages_from_many_threads_all_arrive_in_each_threads_order() -> None:
    parent, child = Pipe(duplex=False)
    send = _Combined(child)
    received: list[tuple[Any, ...]] = []
    writes = 0

    def read() -> None:
        nonlocal writes
        while len(received) < 16 * 200:
            message = parent.recv()
            writes += 1
            received.extend(message[1] if message[0] == "batch" else [message])

    reader = threading.Thread(target=read)
    reader.start()

    def emit(thread: int) -> None:
        for seq in range(200):
            send(("event", f"run{thread}", seq))

    threads = [threading.Thread(target=emit, args=(n,)) for n in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    reader.join(30)
    assert not reader.is_alive()
    for n in range(16):
        assert [m[2] for m in received if m[1] == f"run{n}"] == list(range(200))
    assert writes <= len(received)


def test_a_message_that_does_not_pickle_takes_no_other_with_it() -> None:
    parent, child = Pipe(duplex=False)
    send = _Combined(child)
    unpicklable = threading.Lock()
    send._pending.append(("event", "a", 0))  # as if left by a thread while another wrote
    send._pending.append(("event", "b", unpicklable))
    send(("end", "c", unpicklable, None))
    send(("end", "a", "result", None))
    received: list[tuple[Any, ...]] = []
    while parent.poll(1):
        message = parent.recv()
        received.extend(message[1] if message[0] == "batch" else [message])
    assert received[0] == ("event", "a", 0)
    assert received[1][:3] == ("end", "c", None) and "could not be sent" in received[1][3]
    assert received[2] == ("end", "a", "result", None)
    assert len(received) == 3  # the event that would not pickle was dropped alone
