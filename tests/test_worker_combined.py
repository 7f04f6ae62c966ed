"""A worker's messages to its parent (executors/worker.py _Combined): from
many run threads at once, every message arrives, each thread's in order,
several to a write when they come together; the parent (procs.py) takes a
batch apart in order."""

from __future__ import annotations

import threading
import time
from multiprocessing import Pipe
from typing import Any

from spearpy.executors.worker import _MAX_PENDING, _Combined


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


def test_a_parent_that_does_not_read_holds_the_senders_not_the_memory() -> None:
    parent, child = Pipe(duplex=False)
    send = _Combined(child)
    # More than the pipe holds: its writer blocks until the parent reads.
    first = threading.Thread(target=send, args=(("event", "a", b"x" * (1 << 20)),))
    first.start()
    deadline = time.monotonic() + 30
    while not send._send_lock.locked():
        assert time.monotonic() < deadline, "the first message was never written"
        time.sleep(0.01)
    count = 20 * _MAX_PENDING

    def emit() -> None:
        for seq in range(count):
            send(("event", "b", seq))

    second = threading.Thread(target=emit)
    second.start()
    while len(send._pending) < _MAX_PENDING and second.is_alive():
        assert time.monotonic() < deadline, "the messages were never left for the writer"
        time.sleep(0.01)
    second.join(0.5)
    # Without the bound the thread left all its messages and went on.
    assert second.is_alive(), "a sender went on past the bound while nothing was read"
    assert len(send._pending) <= _MAX_PENDING + 1
    received: list[tuple[Any, ...]] = []
    while len(received) < count + 1:
        assert parent.poll(30), f"only {len(received)} messages came"
        message = parent.recv()
        received.extend(message[1] if message[0] == "batch" else [message])
    first.join(30)
    second.join(30)
    assert not first.is_alive() and not second.is_alive()
    assert received[0][1] == "a" and len(received[0][2]) == 1 << 20
    assert [m[2] for m in received[1:]] == list(range(count))
