"""The WASI calls spearpy answers itself: `poll_oneoff` and `clock_time_get`,
so that a guest's sleep obeys the run, and `random_get`, so that a journaled
run's randomness is journaled like its clocks (docs/durable.md).

C's sleep()/nanosleep() and Rust's thread::sleep reach the host as
poll_oneoff with a clock subscription. wasmtime's own implementation blocks
the thread in a system call, where neither epoch interruption nor the cancel
event can reach it: `sleep(86400)` outlived --timeout and ignored cancel.
Here a clock wait goes through `RunContext.wait` like spear's `sleep_ms` (never
past the run or tool deadline, woken by cancel).

Every fd a spearpy guest can poll is a regular file or a pipe the host
drains, so fd subscriptions are reported ready at once (nbytes 0: the
guest's read or write then finds out how much there is).

`clock_time_get` is here too because an absolute-time sleep
(clock_nanosleep with TIMER_ABSTIME) names a time on the guest's clock:
wasmtime's monotonic clock counts from its own origin, so the host must
own the clock it compares against.

Layouts (wasi_snapshot_preview1): subscription = 48 bytes {userdata u64,
tag u8 @8, clock {id u32 @16, timeout u64 @24, precision u64 @32, flags u16
@40} | fd_readwrite {fd u32 @16}}; event = 32 bytes {userdata u64, error u16
@8, type u8 @10, fd_readwrite {nbytes u64 @16, flags u16 @24}}.
"""

from __future__ import annotations

import secrets
import struct
import time
from typing import TYPE_CHECKING, Final

from spearpy.memory import GuestFault

if TYPE_CHECKING:
    from spearpy.context import RunContext

WASI_MODULE: Final = "wasi_snapshot_preview1"
# WASI errno values (not spear's negative ones).
_ESUCCESS, _EFAULT, _EINVAL, EIO = 0, 21, 28, 29
_CLOCK, _FD_READ, _FD_WRITE = 0, 1, 2
_REALTIME, _MONOTONIC = 0, 1
_ABSTIME = 1
_SUB = struct.Struct("<QB7xIxxxxQQH6x")  # clock view of a subscription
_EVENT = struct.Struct("<QHB5xQH6x")
# A guest may hand any count; more than this is not a real program.
_MAX_SUBSCRIPTIONS = 4096


_CLOCKS = {0: time.time_ns, 1: time.monotonic_ns, 2: time.process_time_ns,
           3: time.thread_time_ns}


def clock_time_get(run: RunContext, clock_id: int, _precision: int, time_ptr: int) -> int:
    clock = _CLOCKS.get(clock_id)
    if clock is None:
        return _EINVAL
    try:
        run.memory.write(time_ptr, struct.pack("<Q", clock()))
    except GuestFault:
        return _EFAULT
    return _ESUCCESS


# A buffer as large as the guest's memory is filled a piece at a time: the
# host never holds more than this of it.
_RANDOM_CHUNK: Final = 1 << 16


def random_get(run: RunContext, buf_ptr: int, buf_len: int) -> int:
    """`buf_len` random bytes at `buf_ptr`, like wasmtime's (the OS's CSPRNG)."""
    length, ptr = buf_len & 0xFFFFFFFF, buf_ptr & 0xFFFFFFFF
    try:
        run.memory.check(ptr, length)
        for offset in range(0, length, _RANDOM_CHUNK):
            run.memory.write(ptr + offset, secrets.token_bytes(min(_RANDOM_CHUNK,
                                                                   length - offset)))
    except GuestFault:
        return _EFAULT
    return _ESUCCESS


def _clock_delay(clock_id: int, timeout_ns: int, flags: int) -> float | None:
    """Seconds to wait for one clock subscription, None for an unknown clock."""
    if clock_id not in _CLOCKS:
        return None
    if not flags & _ABSTIME:
        return timeout_ns / 1e9
    if clock_id == _REALTIME:
        return (timeout_ns - time.time_ns()) / 1e9
    if clock_id == _MONOTONIC:
        return (timeout_ns - time.monotonic_ns()) / 1e9  # the clock clock_time_get reads
    return None


def poll_oneoff(run: RunContext, in_ptr: int, out_ptr: int, nsubscriptions: int,
                nevents_ptr: int) -> int:
    in_ptr &= 0xFFFFFFFF
    out_ptr &= 0xFFFFFFFF
    if nsubscriptions <= 0 or nsubscriptions > _MAX_SUBSCRIPTIONS:
        return _EINVAL
    if in_ptr % 8 or out_ptr % 8 or nevents_ptr % 4:
        return _EINVAL
    try:
        raw = run.memory.read(in_ptr, nsubscriptions * _SUB.size)
        run.memory.read(out_ptr, nsubscriptions * _EVENT.size)  # must be writable memory
        run.memory.read(nevents_ptr, 4)
    except GuestFault:
        return _EFAULT
    ready: list[bytes] = []
    clocks: list[tuple[float, int]] = []
    for i in range(nsubscriptions):
        chunk = raw[i * _SUB.size:(i + 1) * _SUB.size]
        userdata, tag, clock_id, timeout_ns, _precision, flags = _SUB.unpack(chunk)
        if tag == _CLOCK:
            delay = _clock_delay(clock_id, timeout_ns, flags)
            if delay is None:
                ready.append(_EVENT.pack(userdata, _EINVAL, tag, 0, 0))
            else:
                clocks.append((max(delay, 0.0), userdata))
        elif tag in (_FD_READ, _FD_WRITE):
            ready.append(_EVENT.pack(userdata, _ESUCCESS, tag, 0, 0))
        else:
            return _EINVAL
    if not ready and clocks:
        soonest = min(delay for delay, _ in clocks)
        run.interrupts.wait(soonest)  # bounded by the deadlines; cancel ends the run here
        ready = [_EVENT.pack(userdata, _ESUCCESS, _CLOCK, 0, 0)
                 for delay, userdata in clocks if delay <= soonest]
    try:
        run.memory.write(out_ptr, b"".join(ready))
        run.memory.write_u32(nevents_ptr, len(ready))
    except GuestFault:
        return _EFAULT
    return _ESUCCESS
