"""spear_fd_ctl and the spear_epoll_* family."""

from __future__ import annotations

import json
import struct
from typing import TYPE_CHECKING

from spearpy import _json, abi
from spearpy.fds import EpollFd
from spearpy.memory import GuestFault

if TYPE_CHECKING:
    from spearpy.context import RunContext

_RECORD = struct.Struct("<ii")




def spear_fd_ctl(run: RunContext, fd: int, cmd: int, arg_ptr: int, arg_len_ptr: int) -> int:
    entry = run.fds.lookup(fd)
    if entry is None:
        return abi.EBADF
    try:
        if cmd == abi.FD_CTL_SET_FLAGS:
            length = run.memory.read_u32(arg_len_ptr)
            run.memory.check(arg_ptr, length)
            if length > abi.MAX_FD_FLAGS_BYTES:
                return abi.EINVAL  # before reading: the valid JSON is a few dozen bytes
            raw = run.memory.read(arg_ptr, length)
            try:
                request = _json.loads(raw)
            except (UnicodeDecodeError, json.JSONDecodeError):
                return abi.EINVAL
            if not isinstance(request, dict):
                return abi.EINVAL
            to_set, to_clear = request.get("set", []), request.get("clear", [])
            if not isinstance(to_set, list) or not isinstance(to_clear, list):
                return abi.EINVAL
            if "O_NONBLOCK" in to_set:
                entry.nonblock = True
            if "O_NONBLOCK" in to_clear:
                entry.nonblock = False
            return 0
        if cmd == abi.FD_CTL_GET_FLAGS:
            payload = _json.compact_bytes({"flags": entry.flags()})
        elif cmd == abi.FD_CTL_GET_KIND:
            payload = _json.compact_bytes({"kind": entry.kind})
        elif cmd == abi.FD_CTL_GET_STATUS:
            payload = run.fds.status_json(fd)
        elif cmd == abi.FD_CTL_GET_METRICS:
            metrics = entry.metrics()
            if isinstance(metrics, int):
                return metrics  # a response whose send is still running
            payload = _json.compact_bytes(metrics)
        else:
            return abi.EINVAL
        return run.memory.write_out(arg_ptr, arg_len_ptr, payload)
    except GuestFault:
        return abi.EFAULT


def spear_epoll_create(run: RunContext) -> int:
    return run.fds.open(EpollFd())


def spear_epoll_ctl(run: RunContext, epfd: int, op: int, fd: int, events: int) -> int:
    epoll = run.fds.get(epfd, EpollFd)
    if epoll is None:
        return abi.EBADF
    target = run.fds.lookup(fd)
    if target is None:
        return abi.EBADF
    if target is epoll or isinstance(target, EpollFd):
        return abi.EINVAL
    if op in (abi.EPOLL_CTL_ADD, abi.EPOLL_CTL_MOD):
        epoll.watch(run.fds, fd, events)
        return 0
    if op == abi.EPOLL_CTL_DEL:
        epoll.interests.pop(fd, None)
        return 0
    return abi.EINVAL


def spear_epoll_wait(run: RunContext, epfd: int, out_ptr: int, out_len_ptr: int,
                     timeout_ms: int) -> int:
    epoll = run.fds.get(epfd, EpollFd)
    if epoll is None:
        return abi.EBADF
    try:
        capacity = run.memory.read_u32(out_len_ptr)
        ready = epoll.ready(run.fds)
        if not ready and timeout_ms != 0:
            ready = _wait_for_ready(run, epoll, timeout_ms)
        if not ready:
            run.memory.write_u32(out_len_ptr, 0)
            return 0
        if capacity < _RECORD.size:
            run.memory.write_u32(out_len_ptr, len(ready) * _RECORD.size)
            return abi.ENOSPC
        ready = ready[: capacity // _RECORD.size]
        run.memory.write(out_ptr, b"".join(_RECORD.pack(fd, mask) for fd, mask in ready))
        run.memory.write_u32(out_len_ptr, len(ready) * _RECORD.size)
        return len(ready)
    except GuestFault:
        return abi.EFAULT


def _wait_for_ready(run: RunContext, epoll: EpollFd, timeout_ms: int) -> list[tuple[int, int]]:
    """Block on the run's waker until an interest is ready, the timeout passes
    or the run is interrupted (deadline, cancel: the guest ends with a trap).
    An infinite timeout over fds that cannot change while the guest waits
    (chat fds: sends complete synchronously) returns at once: it could only
    deadlock."""
    if timeout_ms < 0 and not epoll.watches_changing(run.fds):
        return []
    ready: list[tuple[int, int]] = []

    def done() -> bool:
        nonlocal ready
        ready = epoll.ready(run.fds)
        return bool(ready)

    run.interrupts.block_until(done, timeout_ms / 1000.0 if timeout_ms > 0 else None)
    return ready


def spear_epoll_close(run: RunContext, epfd: int) -> int:
    if run.fds.get(epfd, EpollFd) is None:
        return abi.EBADF if run.fds.lookup(epfd) is not None else run.fds.close(epfd)
    return run.fds.close(epfd)
