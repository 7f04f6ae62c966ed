"""The rtasr_* family (SPEAR's realtime speech recognition fds).

Return codes are SPEAR's: -EBADF for an fd that is not an open rtasr fd,
-EINVAL for a ctl command out of 1..8, a missing or non-JSON argument, a
set-param without a `key`, an autoflush SPEAR would refuse; -EIO for a
connect, send-event, flush, clear or write on an fd whose connection failed
(its status says why); -EAGAIN when the send queue is full (write,
send-event, flush, clear) or no event is queued (read); -ENOSPC with the
needed length when the read or status buffer is too small (the event is
kept); -EFAULT for memory outside the guest's. rtasr_write returns the
number of bytes queued, as SPEAR's.

spearpy's own choices where SPEAR's is unsafe or silent (docs/audio.md):
the `ws_url` param is -EACCES (the host sends the operator's key to the
realtime URL, so the guest may not choose it) and the `backend` param picks
among the operator's `[realtime.NAME]` backends only (an unknown name is
-EINVAL at connect, its status naming the configured ones); a write larger than the
whole send queue is -EINVAL (it could never fit: -EAGAIN would make a guest
retry forever); audio written is charged against the run's audio budget
(-EDQUOT past it, as mic_read), a send-event's JSON against max_host_bytes
(it may wait for the run's life on an fd never connected); queue sizes a
guest sets are capped at 16 MiB, the receive queue (the upstream fills it)
at max_host_bytes / MAX_CONNECTIONS_PER_RUN; a run has at most
MAX_CONNECTIONS_PER_RUN connected rtasr fds at once (connect is -EMFILE past
it).
"""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING, Any

from spearpy import _json, abi
from spearpy.asr import protocol
from spearpy.asr.segmentation import SegmentationError, parse
from spearpy.fds.rtasr import (
    CONFIGURED,
    CONNECTING,
    ERROR,
    INIT,
    MAX_QUEUE_BYTES,
    RtAsrFd,
)
from spearpy.hostcalls.limits import json_cost
from spearpy.memory import GuestFault
from spearpy.observe import events as ev

if TYPE_CHECKING:
    from spearpy.context import RunContext

SET_PARAM, CONNECT, GET_STATUS, SEND_EVENT, FLUSH, CLEAR, SET_AUTOFLUSH, GET_AUTOFLUSH = range(1, 9)
# set-param and autoflush JSON are small; send-event is bounded by the send queue.
MAX_CTL_ARG_BYTES = 64 * 1024
_GUEST_MAY_NOT_SET = frozenset({"ws_url"})
MAX_CONNECTIONS_PER_RUN = 16


def rtasr_create(run: RunContext) -> int:
    entry = RtAsrFd(run.interrupts.waker)
    entry.max_recv_queue_bytes = min(entry.max_recv_queue_bytes, _recv_share(run))
    return run.fds.open(entry)


def _recv_share(run: RunContext) -> int:
    """The most one receive queue holds: the upstream fills it, uncharged, so
    all the fds connected at once hold at most max_host_bytes."""
    return min(MAX_QUEUE_BYTES, run.config.max_host_bytes // MAX_CONNECTIONS_PER_RUN)


def rtasr_ctl(run: RunContext, fd: int, cmd: int, arg_ptr: int, arg_len_ptr: int) -> int:
    try:
        arg_len = run.memory.read_u32(arg_len_ptr)
    except GuestFault:
        return abi.EFAULT
    entry = run.fds.get(fd, RtAsrFd)
    if entry is None:
        return abi.EBADF
    if cmd == GET_STATUS:
        return _write_json(run, arg_ptr, arg_len_ptr, entry.status())
    if cmd == GET_AUTOFLUSH:
        return _write_json(run, arg_ptr, arg_len_ptr, entry.segmentation.to_json())
    if cmd == CONNECT:
        return connect(run, entry)
    if cmd in (FLUSH, CLEAR):
        if entry.state == ERROR:
            return abi.EIO
        text = protocol.COMMIT if cmd == FLUSH else protocol.CLEAR
        return 0 if entry.flush_marker(text, pending=cmd == FLUSH) else abi.EAGAIN
    if cmd not in (SET_PARAM, SEND_EVENT, SET_AUTOFLUSH):
        return abi.EINVAL
    limit = entry.max_send_queue_bytes if cmd == SEND_EVENT else MAX_CTL_ARG_BYTES
    if arg_len == 0 or arg_len > limit:
        return abi.EINVAL
    try:
        if cmd == SEND_EVENT:
            # An event waits in the send queue until a connection sends it
            # (on an fd never connected: for the run's life), and its parse
            # may take many times its size: both are the run's host bytes.
            run.memory.check(arg_ptr, arg_len)
            run.reserve_bytes(arg_len, "an rtasr event")
            raw = run.memory.read(arg_ptr, arg_len)
            run.reserve_bytes(json_cost(raw), "an rtasr event")
        else:
            raw = run.memory.read(arg_ptr, arg_len)
        value = _json.loads(raw)
    except GuestFault:
        return abi.EFAULT
    except (ValueError, RecursionError):
        return abi.EINVAL
    if cmd == SET_PARAM:
        return _set_param(run, entry, value, arg_len)
    if cmd == SET_AUTOFLUSH:
        try:
            entry.segmentation = parse(value)
        except SegmentationError:
            return abi.EINVAL
        entry.reset_flush()
        return 0
    if entry.state == ERROR:
        return abi.EIO
    try:
        text = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    except ValueError:
        return abi.EINVAL
    if not entry.enqueue(text):
        return abi.EAGAIN
    run.charge(arg_len, "an rtasr event")
    return 0


def _write_json(run: RunContext, out_ptr: int, out_len_ptr: int, body: dict[str, Any]) -> int:
    try:
        return run.memory.write_out(out_ptr, out_len_ptr, _json.compact_bytes(body))
    except GuestFault:
        return abi.EFAULT


def _uint(value: Any) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    return None


def _set_param(run: RunContext, entry: RtAsrFd, value: Any, nbytes: int) -> int:
    key = value.get("key") if isinstance(value, dict) else None
    if not isinstance(key, str) or not key:
        return abi.EINVAL
    if key in _GUEST_MAY_NOT_SET:
        return abi.EACCES
    if key not in entry.params:
        run.charge(nbytes, "rtasr params")  # the host keeps them: a guest cannot set millions
    param = value.get("value")
    entry.params[key] = param
    size = _uint(param)
    with entry.cond:
        if entry.state == INIT:
            entry.state = CONFIGURED
        if key == "max_send_queue_bytes" and size is not None:
            entry.max_send_queue_bytes = min(size, MAX_QUEUE_BYTES)
        elif key == "max_recv_queue_bytes" and size is not None:
            entry.max_recv_queue_bytes = min(size, _recv_share(run))
    run.interrupts.waker.wake()  # readiness may have changed (a larger send queue: EPOLLOUT)
    return 0


def connect(run: RunContext, entry: RtAsrFd) -> int:
    if entry.state == ERROR:
        return abi.EIO
    if entry.worker is not None:
        return 0  # SPEAR: connecting again is a no-op
    live = sum(1 for _fd, other in run.fds.entries()
               if isinstance(other, RtAsrFd) and other.can_change())
    if live >= MAX_CONNECTIONS_PER_RUN:
        return abi.EMFILE  # each holds threads and a socket: a guest may not open hundreds
    from spearpy.asr.connection import RealtimeConnection
    from spearpy.asr.stub import StubTransport
    from spearpy.observe.scrub import SecretScrubber

    params = entry.params
    if params.get("transport", "stub") != "websocket":
        worker: RealtimeConnection | StubTransport = StubTransport(entry)
        with entry.cond:
            entry.state = "Connected"
    else:
        from spearpy.backends.realtime import realtime_target

        target = realtime_target(run.config, params.get("backend"))
        if isinstance(target, str):  # the guest named a backend the operator has not
            with entry.cond:
                entry.last_error = target
            return abi.EINVAL
        url = target.url
        model = params.get("model") or target.model
        key = os.environ.get(target.key_env, "") if target.key_env else ""
        secret = params.get("client_secret")
        bearer = secret if isinstance(secret, str) and secret else key
        headers = {"OpenAI-Beta": "realtime=v1"}
        if bearer:
            headers["Authorization"] = f"Bearer {bearer}"
        session = protocol.session_update(
            model if isinstance(model, str) and model else protocol.DEFAULT_MODEL,
            entry.segmentation)
        keys = [key, *(os.environ.get(name, "") for name in run.services.key_envs())]
        worker = RealtimeConnection(entry, url, headers, session, SecretScrubber(keys),
                                    run.interrupts, run.config.max_retries)
        with entry.cond:
            entry.state = CONNECTING
    entry.worker = worker
    worker.start()
    return 0


def rtasr_write(run: RunContext, fd: int, buf_ptr: int, length: int) -> int:
    entry = run.fds.get(fd, RtAsrFd)
    if entry is None:
        return abi.EBADF
    try:
        run.memory.check(buf_ptr, length)
    except GuestFault:
        return abi.EFAULT
    if entry.state == ERROR:
        return abi.EIO
    if length > entry.max_send_queue_bytes:
        return abi.EINVAL
    if entry.send_queue_bytes + length > entry.max_send_queue_bytes:
        entry.want = length  # EPOLLOUT once this write fits
        return abi.EAGAIN  # only the connection's thread changes it meanwhile, downwards
    if length and not charge_audio(run, fd, entry, length):
        return over_budget(run, fd, entry)
    if not entry.enqueue(run.memory.read(buf_ptr, length), audio=True):
        return abi.EAGAIN
    return length


def charge_audio(run: RunContext, fd: int, entry: RtAsrFd, length: int) -> bool:
    from spearpy.audio.budget import audio_budget

    rate = _uint(entry.params.get("sample_rate_hz")) or protocol.SAMPLE_RATE_HZ
    return audio_budget(run).charge(length, length / (rate * 2))


def over_budget(run: RunContext, fd: int, entry: RtAsrFd) -> int:
    from spearpy.audio.budget import OVER_BUDGET, audio_budget

    budget = audio_budget(run)
    limit = budget.exceeded or "max_audio_bytes"
    if not budget.reported:
        budget.reported = True
        run.events.emit(ev.LIMIT_HIT, fd, limit=limit, value=budget.limit_value())
    with entry.cond:
        entry.last_error = f"the run's audio limit {limit} was reached"
    return OVER_BUDGET


def rtasr_read(run: RunContext, fd: int, out_ptr: int, out_len_ptr: int) -> int:
    entry = run.fds.get(fd, RtAsrFd)
    if entry is None:
        return abi.EBADF
    event = entry.take_event()
    if event is None:
        return abi.EAGAIN
    try:
        rc = run.memory.write_out(out_ptr, out_len_ptr, event)
    except GuestFault:
        return abi.EFAULT
    if rc >= 0:
        entry.pop_event()  # the guest's thread is the only consumer: still the head
    return rc


def rtasr_close(run: RunContext, fd: int) -> int:
    return run.close_fd(fd, "guest", RtAsrFd)
