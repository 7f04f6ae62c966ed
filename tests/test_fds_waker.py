"""Fds as objects with a waker: an fd made ready from another thread wakes a
guest blocked in spear_epoll_wait, with no polling; cancel and the deadline
wake it too; the table and epoll never look at an fd's kind."""

from __future__ import annotations

import struct
import threading
import time
from typing import Any

import pytest

from spearpy import _native, abi
from spearpy.fds import Fd, Waker


class FedFd(Fd):
    """A kind fed from another thread, as user streams and audio will be."""

    kind = "Fed"

    def __init__(self, waker: Waker) -> None:
        super().__init__()
        self._waker = waker
        self._frames: list[bytes] = []
        self._lock = threading.Lock()

    def feed(self, frame: bytes) -> None:
        with self._lock:
            self._frames.append(frame)
        self._waker.wake()  # after the change: a wake-up is never lost

    def readiness(self) -> int:
        with self._lock:
            return abi.EPOLLIN if self._frames else 0

    def can_change(self) -> bool:
        return True


def _epoll_on(p: Any, fed: FedFd) -> tuple[int, int]:
    fd = p.run.fds.open(fed)
    ep = p.hc("spear_epoll_create")
    assert p.hc("spear_epoll_ctl", ep, abi.EPOLL_CTL_ADD, fd, abi.EPOLLIN) == 0
    p.u32(p.A, 64)
    return fd, ep


def test_an_fd_made_ready_by_another_thread_wakes_an_infinite_wait(probe: Any) -> None:
    p = probe()
    fed = FedFd(p.run.interrupts.waker)
    fd, ep = _epoll_on(p, fed)
    feeder = threading.Timer(0.3, fed.feed, args=(b"frame",))
    feeder.start()
    started = time.monotonic()
    assert p.hc("spear_epoll_wait", ep, p.B, p.A, -1) == 1  # blocks until fed
    assert time.monotonic() - started >= 0.25
    assert struct.unpack("<ii", p.get(p.B, 8)) == (fd, abi.EPOLLIN)
    feeder.join()
    # A finite wait on an fd that stays quiet returns 0 at its timeout.
    quiet = FedFd(p.run.interrupts.waker)
    _, ep2 = _epoll_on(p, quiet)
    assert p.hc("spear_epoll_wait", ep2, p.B, p.A, 50) == 0


def test_the_status_of_any_kind_comes_from_the_object(probe: Any) -> None:
    p = probe()
    fed = FedFd(p.run.interrupts.waker)
    fd = p.run.fds.open(fed)
    fed.feed(b"x")
    p.u32(p.A, 256)
    n = p.hc("spear_fd_ctl", fd, abi.FD_CTL_GET_STATUS, p.B, p.A)
    assert p.get(p.B, n) == b'{"kind":"Fed","flags":[],"poll_mask":["EPOLLIN"],"closed":false}'
    assert p.hc("spear_epoll_close", fd) == abi.EBADF  # not an epoll fd
    assert p.hc("cchat_close", fd) == abi.EBADF  # not a chat fd


@pytest.mark.parametrize("how", ["cancel", "deadline"])
def test_cancel_and_deadline_end_a_blocked_wait(probe: Any, how: str) -> None:
    p = probe()
    _, ep = _epoll_on(p, FedFd(p.run.interrupts.waker))
    if how == "cancel":
        threading.Timer(0.2, p.run.interrupts.cancel, args=("cancelled", "stop")).start()
    else:
        p.run.interrupts.deadline = time.monotonic() + 0.2
    with pytest.raises(_native.HostInterrupt) as ended:
        # The hostcall's trampoline turns this into a trap for a real guest;
        # calling the Python side directly shows the interrupt itself.
        from spearpy.hostcalls.fd import spear_epoll_wait

        previous = _native.enter_run(p.run)
        try:
            spear_epoll_wait(p.run, ep, p.B, p.A, -1)
        finally:
            _native.enter_run(previous)
    assert ended.value.outcome == ("cancelled" if how == "cancel" else "timeout")


def test_a_waker_never_loses_a_wake_up() -> None:
    waker, state = Waker(), {"n": 0}

    def bump() -> None:
        for _ in range(2000):
            state["n"] += 1
            waker.wake()

    thread = threading.Thread(target=bump)
    thread.start()
    assert waker.wait_until(lambda: state["n"] >= 2000, time.monotonic() + 30)
    thread.join()
    assert not waker.wait_until(lambda: False, time.monotonic() + 0.05)
