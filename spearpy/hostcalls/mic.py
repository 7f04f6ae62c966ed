"""The mic_* family (SPEAR's microphone fds): mic_create, mic_ctl (1
set-param JSON, 2 get-status JSON), mic_read (one PCM frame), mic_close.

Return codes are SPEAR's: set-param JSON that does not parse or cannot be
used (a bad base64 stub, a format other than pcm16, frames no microphone
makes) is -EINVAL; a source that cannot start is -EIO with the reason in
get-status's `last_error` (SPEAR's answer for a device without fallback);
mic_read gives -EAGAIN when no frame is queued, -ENOSPC with the needed
length when the buffer is too small (the frame is kept), -EBADF for any
other fd; an unknown ctl command is -EINVAL. spearpy's own: a `file` path
outside the run's mounts is -EACCES, a `user_stream` source on a run no
client can reach -ENOTCONN, a seventeenth mic running at once -EMFILE (all
with `last_error`), and a read past the
run's audio budget -EDQUOT (-122, spearpy.audio.budget): the mic stops,
`last_error` says which limit, the fd reports EPOLLERR, and one limit_hit
event goes out.
"""

from __future__ import annotations

import dataclasses
import json
from typing import TYPE_CHECKING, Final

from spearpy import _json, abi
from spearpy.audio.budget import OVER_BUDGET, audio_budget
from spearpy.audio.params import ParamError, parse
from spearpy.audio.pump import Pump
from spearpy.fds.mic import MicFd
from spearpy.memory import GuestFault
from spearpy.observe import events as ev

if TYPE_CHECKING:
    from spearpy.audio.params import MicParams
    from spearpy.audio.pump import Source
    from spearpy.audio.userstream import StreamPuller
    from spearpy.context import RunContext

MIC_CTL_SET_PARAM: Final = 1
MIC_CTL_GET_STATUS: Final = 2
# Room for SPEAR's largest stub (10 MiB of PCM, as base64) and the rest.
MAX_MIC_PARAM_BYTES: Final = 14 << 20
# Sources running at once in one run (each may be a thread and a full
# queue): a guest opening a thousand stub mics it never reads gets -EMFILE
# past this, not a thousand threads. Each queue is at most its share of
# max_host_bytes, so all of them together stay within it.
MAX_RUNNING_MICS: Final = 16


def mic_create(run: RunContext) -> int:
    return run.fds.open(MicFd(run.interrupts.waker))


def mic_ctl(run: RunContext, fd: int, cmd: int, arg_ptr: int, arg_len_ptr: int) -> int:
    entry = run.fds.get(fd, MicFd)
    if entry is None:
        return abi.EBADF
    try:
        if cmd == MIC_CTL_SET_PARAM:
            return _set_param(run, entry, arg_ptr, arg_len_ptr)
        if cmd == MIC_CTL_GET_STATUS:
            return run.memory.write_out(arg_ptr, arg_len_ptr,
                                        _json.compact_bytes(entry.status()))
    except GuestFault:
        return abi.EFAULT
    return abi.EINVAL


def _set_param(run: RunContext, entry: MicFd, arg_ptr: int, arg_len_ptr: int) -> int:
    configured = configure(run, entry, arg_ptr, arg_len_ptr)
    if isinstance(configured, int):
        return configured
    params, queue = configured
    generation = entry.restart(params.fmt, queue)
    # Here, not at the top: the sources pull in numpy and soxr (~180 ms),
    # which every run would pay at start-up (the hostcall table imports this
    # module) though few guests open a microphone.
    from spearpy.audio.select import SourceError

    try:
        source = open_for(run, params)
    except SourceError as exc:
        entry.fail_start(exc.message)
        return exc.errno
    attach_source(entry, source, generation, params.fmt.frame_ms)
    return 0


def configure(run: RunContext, entry: MicFd, arg_ptr: int, arg_len_ptr: int, *,
              count_running: bool = True) -> tuple[MicParams, int] | int:
    """A set-param's params and queue size, or the errno that refuses them
    (the part of a set-param that depends on the guest alone: a replay
    makes it again, spearpy/hostcalls/audio_golive.py, without counting the
    mics running: a replayed mic whose source ended then still looks so)."""
    length = run.memory.read_u32(arg_len_ptr)
    run.memory.check(arg_ptr, length)
    if length > MAX_MIC_PARAM_BYTES:
        return abi.EINVAL  # before reading it
    run.reserve_bytes(length, "mic params")
    try:
        params = parse(_json.loads(run.memory.read(arg_ptr, length)))
    except (UnicodeDecodeError, json.JSONDecodeError, ParamError):
        return abi.EINVAL
    if params.stub_pcm16 is not None:
        run.charge(len(params.stub_pcm16), "a mic stub")
        entry.stub_pcm16 = params.stub_pcm16
    elif entry.stub_pcm16 is not None:
        params = dataclasses.replace(params, stub_pcm16=entry.stub_pcm16)
    running = sum(1 for _fd, other in run.fds.entries()
                  if isinstance(other, MicFd) and other is not entry and other.running
                  ) if count_running else 0
    if running >= MAX_RUNNING_MICS:
        entry.fail_start(f"{running} mics are running in this run; at most "
                         f"{MAX_RUNNING_MICS} at once")
        return abi.EMFILE
    # Every queue, SPEAR's 512 KiB default included, is at most its share of
    # max_host_bytes: all the mics a run may have running fill it at most.
    asked = params.max_queue_bytes
    queue = min(entry.max_queue_bytes if asked is None else asked,
                run.config.max_host_bytes // MAX_RUNNING_MICS)
    return params, queue


def open_for(run: RunContext, params: MicParams) -> Source | StreamPuller:
    """The source `params` name, opened for this run (SourceError if it cannot)."""
    from spearpy.audio.select import open_source

    return open_source(params, dirs=run.options.dirs, mic_file=run.config.mic_file,
                       realtime=run.config.mic_pace == "realtime",
                       streams=run.options.streams)


def attach_source(entry: MicFd, source: Source | StreamPuller, generation: int,
                  frame_ms: int) -> None:
    """`source` feeds `entry` from now, for configuration `generation`."""
    from spearpy.audio.userstream import StreamPuller

    if isinstance(source, StreamPuller):
        entry.attach(source.name, puller=source)
    else:
        pump = Pump(source, entry, generation, frame_ms)
        entry.attach(source.name, worker=pump)
        pump.start()


def mic_read(run: RunContext, fd: int, out_ptr: int, out_len_ptr: int) -> int:
    entry = run.fds.get(fd, MicFd)
    if entry is None:
        return abi.EBADF
    frame = entry.head()
    if frame is None:
        return abi.EAGAIN
    fmt = entry.config
    seconds = fmt.seconds(len(frame)) if fmt is not None else 0.0
    budget = audio_budget(run)
    if not budget.charge(len(frame), seconds):
        return over_budget(run, fd, entry)
    try:
        rc = run.memory.write_out(out_ptr, out_len_ptr, frame)
    except GuestFault:
        rc = abi.EFAULT
    if rc < 0:
        budget.refund(len(frame), seconds)
        return rc
    entry.take(frame)
    return rc


def over_budget(run: RunContext, fd: int, entry: MicFd) -> int:
    budget = audio_budget(run)
    limit = budget.exceeded or "max_audio_bytes"
    if entry.last_error is None:
        entry.halt(f"audio limit reached: {limit} ({budget.limit_value():g} per run)")
    if not budget.reported:
        budget.reported = True
        run.events.emit(ev.LIMIT_HIT, fd, limit=limit, value=budget.limit_value())
    return OVER_BUDGET


def mic_close(run: RunContext, fd: int) -> int:
    return run.close_fd(fd, "guest", MicFd)
