"""The worker threads that carry cancellable completions (driver/upstream.py):
reused from one request to the next, one per request in flight, gone after
their idle time, and never expected in a forked child."""

from __future__ import annotations

import os
import threading
import time

from spearpy.driver.upstream import _WORKERS, _Workers

WAIT_S = 10.0  # bounds a wait that would otherwise hang the suite; never asserted on


def _run(workers: _Workers, count: int, parties: int | None = None) -> set[int]:
    """Thread idents of the workers that ran `count` jobs; with `parties`,
    each job waits at a barrier until `parties` jobs are running at once."""
    barrier = threading.Barrier(parties) if parties else None
    idents: set[int] = set()
    done = [threading.Event() for _ in range(count)]
    failures: list[BaseException] = []

    def job(event: threading.Event) -> None:
        try:
            idents.add(threading.get_ident())
            if barrier is not None:
                barrier.wait(WAIT_S)
        except BaseException as exc:
            failures.append(exc)
        finally:
            event.set()

    idle = workers.idle
    for event in done:
        workers.submit(lambda e=event: job(e))  # type: ignore[misc]
        if barrier is None:  # one at a time, each worker back in the pool before the next
            assert event.wait(WAIT_S)
            _settle(workers, max(idle, 1))
    assert all(event.wait(WAIT_S) for event in done)
    _settle(workers, max(idle, len(idents)))
    assert failures == []
    return idents


def _settle(workers: _Workers, idle: int) -> None:
    """Wait until `idle` workers are back waiting (a worker counts itself idle
    just after its job returns)."""
    deadline = time.monotonic() + WAIT_S
    while workers.idle < idle and time.monotonic() < deadline:
        time.sleep(0.001)


def _upstream_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "spearpy-upstream"]


def test_one_request_after_another_reuses_one_worker() -> None:
    workers = _Workers()
    assert len(_run(workers, 20)) == 1


def test_requests_in_flight_together_each_get_a_worker() -> None:
    # Eight jobs that only finish once all eight run: one waiting behind
    # another would break the barrier.
    workers = _Workers()
    first = _run(workers, 8, parties=8)
    assert len(first) == 8
    # All eight are idle now and serve the next burst without new threads.
    assert _run(workers, 8, parties=8) == first


def test_idle_workers_leave() -> None:
    before = set(_upstream_threads())
    workers = _Workers(idle_s=0.05)
    _run(workers, 4, parties=4)
    deadline = time.monotonic() + WAIT_S
    while set(_upstream_threads()) - before and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not set(_upstream_threads()) - before
    assert _run(workers, 1)  # and a later request starts a new one


def test_a_forked_child_starts_its_own_workers() -> None:
    _run(_WORKERS, 1)  # the parent has an idle worker the child will not have
    pid = os.fork()
    if pid == 0:  # the child: exit status says whether its job ran
        ran = threading.Event()
        _WORKERS.submit(ran.set)
        os._exit(0 if ran.wait(WAIT_S) else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
