"""spear_fd_ctl and the spear_epoll_* family."""

from __future__ import annotations

import json
import struct
from typing import TYPE_CHECKING

from spearpy import _json, abi
from spearpy.fdtable import EpollSet, FdKind, flags_json
from spearpy.memory import GuestFault

if TYPE_CHECKING:
    from spearpy.instance import GuestRun

_RECORD = struct.Struct("<ii")
_VALID_EVENTS = abi.EPOLLIN | abi.EPOLLOUT | abi.EPOLLERR | abi.EPOLLHUP


def _compact(value: object) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


def spear_fd_ctl(run: GuestRun, fd: int, cmd: int, arg_ptr: int, arg_len_ptr: int) -> int:
    entry = run.fds.entry(fd)
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
            payload = flags_json(entry)
        elif cmd == abi.FD_CTL_GET_KIND:
            payload = _compact({"kind": entry.kind.value})
        elif cmd == abi.FD_CTL_GET_STATUS:
            payload = run.fds.status_json(fd, entry)
        elif cmd == abi.FD_CTL_GET_METRICS:
            if entry.pending:
                return abi.EAGAIN  # a response whose send is still running
            metrics = entry.obj.metrics if entry.kind is FdKind.CHAT_RESPONSE else {}
            payload = _compact(metrics)
        else:
            return abi.EINVAL
        return run.memory.write_out(arg_ptr, arg_len_ptr, payload)
    except GuestFault:
        return abi.EFAULT


def spear_epoll_create(run: GuestRun) -> int:
    return run.fds.open(FdKind.EPOLL, EpollSet())


def spear_epoll_ctl(run: GuestRun, epfd: int, op: int, fd: int, events: int) -> int:
    epoll = run.fds.get(epfd, FdKind.EPOLL)
    if epoll is None:
        return abi.EBADF
    target = run.fds.entry(fd)
    if target is None:
        return abi.EBADF
    if fd == epfd or target.kind is FdKind.EPOLL:
        return abi.EINVAL
    if op in (abi.EPOLL_CTL_ADD, abi.EPOLL_CTL_MOD):
        epoll.interests[fd] = events & _VALID_EVENTS
        return 0
    if op == abi.EPOLL_CTL_DEL:
        epoll.interests.pop(fd, None)
        return 0
    return abi.EINVAL


def spear_epoll_wait(run: GuestRun, epfd: int, out_ptr: int, out_len_ptr: int,
                     timeout_ms: int) -> int:
    epoll = run.fds.get(epfd, FdKind.EPOLL)
    if epoll is None:
        return abi.EBADF
    ready = []
    for fd in sorted(epoll.interests):
        # ERR and HUP are always reported, as with Linux epoll.
        mask = run.fds.ready_events(fd) & (epoll.interests[fd] | abi.EPOLLERR | abi.EPOLLHUP)
        if mask:
            ready.append((fd, mask))
    try:
        capacity = run.memory.read_u32(out_len_ptr)
        if not ready:
            # Sends complete synchronously, so nothing can become ready while
            # we wait: a finite timeout is honoured (bounded by the run
            # deadline); an infinite one would deadlock and returns at once.
            if timeout_ms > 0:
                run.wait(timeout_ms / 1000.0)
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


def spear_epoll_close(run: GuestRun, epfd: int) -> int:
    return run.fds.close(epfd, FdKind.EPOLL)
