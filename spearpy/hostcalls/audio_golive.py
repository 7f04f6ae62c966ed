"""The microphone and realtime ASR in durable runs: what a replayed call set
up, and how a resumed run rebuilds it when it goes live (docs/durable.md).

A replay answers `mic_ctl`, `mic_read`, `rtasr_ctl`, `rtasr_write` and
`rtasr_read` from the journal and opens nothing. What the guest alone
decides is made again as the answers go by (a mic's configuration, an rtasr
fd's params, audio and events queued before its connect), so the fd's state
is the one the journaled run had; what the world would have done (a source
producing frames, a connection sending audio) is left to the go-live hook:

- a mic re-opens the source its set-param named and skips the frames the
  journal already delivered (a file or the stub: the guest reads on where
  it stopped); a user-stream source is bound to the new session's stream;
  a live device cannot go back in time, so its resume is refused;
- an rtasr fd whose connect was replayed connects again: what was already
  transcribed is in the journal, what the guest writes from now goes to the
  new connection.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from spearpy import abi
from spearpy.audio.budget import OVER_BUDGET, audio_budget
from spearpy.durable.golive import Rebuilt, mismatch
from spearpy.errors import HostInterrupt
from spearpy.fds.mic import MicFd
from spearpy.fds.rtasr import RtAsrFd
from spearpy.memory import GuestFault

if TYPE_CHECKING:
    from spearpy.audio.params import MicParams
    from spearpy.audio.pump import Source
    from spearpy.context import RunContext

# A set-param whose source failed to start: SPEAR's failed start (a new
# generation, not running), as the journaled run had it.
_FAILED_START = (abi.EIO, abi.EACCES, -107)  # -107: ENOTCONN (a user_stream source)


@dataclass
class _MicSetup:
    params: MicParams
    generation: int
    frames: int = 0  # delivered to the guest (from the journal) in this generation


@dataclass
class _AudioReplay:
    mics: dict[int, _MicSetup] = field(default_factory=dict)
    connected: set[int] = field(default_factory=set)  # rtasr fds whose connect was replayed


def _state(run: RunContext) -> _AudioReplay:
    return run.state(_new_state)


def _new_state(_run: RunContext) -> _AudioReplay:
    return _AudioReplay()


def _diverged(run: RunContext, what: str) -> HostInterrupt:
    return mismatch(run, f"{what}: the guest's own part of the call does not give the "
                         "journaled answer")


# ---- the microphone ----------------------------------------------------------------


def mic_replayed(run: RunContext, name: str, args: tuple[int, ...], rc: int | None) -> None:
    from spearpy.hostcalls import mic

    entry = run.fds.get(args[0], MicFd) if args else None
    if entry is None:
        return
    assert run.journal is not None
    run.journal.at_go_live(_mics_go_live)
    fd = args[0]
    if name == "mic_ctl" and args[1] == mic.MIC_CTL_SET_PARAM and (
            rc == 0 or rc in _FAILED_START):
        try:
            configured = mic.configure(run, entry, args[2], args[3], count_running=False)
        except GuestFault:
            configured = abi.EFAULT
        if isinstance(configured, int):
            raise _diverged(run, f"mic_ctl set-param on fd {fd} gives {configured}")
        params, queue = configured
        generation = entry.restart(params.fmt, queue)
        if rc == 0:
            _state(run).mics[fd] = _MicSetup(params, generation)
        else:
            entry.fail_start(f"its {params.source} source did not start (error {rc})")
    elif name == "mic_read" and rc is not None and rc >= 0:
        fmt = entry.config
        audio_budget(run).charge(rc, fmt.seconds(rc) if fmt is not None else 0.0)
        entry.frames_read += 1  # what take() counts, for its metrics: no pump runs
        entry.bytes_read += rc
        setup = _state(run).mics.get(fd)
        if setup is not None and setup.generation == entry.generation:
            setup.frames += 1
    elif name == "mic_read" and rc == OVER_BUDGET:
        mic.over_budget(run, fd, entry)


def _mics_go_live(run: RunContext) -> Rebuilt:
    from spearpy.audio.select import SourceError
    from spearpy.audio.stub import StubSource
    from spearpy.audio.wavfile import FileSource
    from spearpy.hostcalls.mic import attach_source, open_for

    done = Rebuilt({fd for fd, entry in run.fds.entries() if isinstance(entry, MicFd)})
    for fd, setup in _state(run).mics.items():
        entry = run.fds.get(fd, MicFd)
        if entry is None or entry.generation != setup.generation or not entry.running:
            continue  # closed, set up again since, or halted (a limit): nothing runs
        if setup.params.source == "device" and run.config.mic_file is None:
            # Whether the journaled run had a device or fell back to the stub
            # is not in its answers; a device cannot go back in time.
            done.refused.append(
                f"fd {fd} (mic): a live microphone cannot be resumed mid-stream (what it "
                "heard while the run was down is gone)")
            continue
        try:
            source = open_for(run, setup.params)
        except SourceError as exc:
            done.refused.append(f"fd {fd} (mic): its {setup.params.source} source cannot be "
                                f"opened again: {exc.message}")
            continue
        # A file or the stub plays on where the journal stopped; a user
        # stream's frames came on the session that ended with the crash.
        if setup.frames and isinstance(source, FileSource | StubSource):
            source = _Skipping(source, setup.frames)
        attach_source(entry, source, setup.generation, setup.params.fmt.frame_ms)
    return done


class _Skipping:
    """A source without its first `skip` frames: those the journal delivered."""

    def __init__(self, inner: Source, skip: int) -> None:
        self._inner = inner
        self._skip = skip
        self.name = inner.name
        self.paced = inner.paced
        self.lossless = inner.lossless

    def frames(self) -> Iterator[bytes]:
        return itertools.islice(self._inner.frames(), self._skip, None)

    def close(self) -> None:
        self._inner.close()


# ---- realtime ASR ------------------------------------------------------------------


def rtasr_replayed(run: RunContext, name: str, args: tuple[int, ...], rc: int | None) -> None:
    from spearpy.hostcalls import rtasr

    if not args:
        return
    fd = args[0]
    entry = run.fds.get(fd, RtAsrFd)
    if entry is None:
        return
    assert run.journal is not None
    run.journal.at_go_live(_rtasr_go_live)
    connected = fd in _state(run).connected
    if name == "rtasr_ctl":
        cmd = args[1]
        if cmd == rtasr.CONNECT:
            if rc == 0:
                _state(run).connected.add(fd)
            return
        # Params and segmentation are the fd's own; an event, a flush or a
        # clear before the connect waits in its queue for the connection.
        host_side = cmd in (rtasr.SET_PARAM, rtasr.SET_AUTOFLUSH) or (
            cmd in (rtasr.SEND_EVENT, rtasr.FLUSH, rtasr.CLEAR) and not connected)
        if rc == 0 and host_side:
            again = rtasr.rtasr_ctl(run, *args)
            if again != rc:
                raise _diverged(run, f"rtasr_ctl {cmd} on fd {fd} gives {again}")
    elif name == "rtasr_write":
        if not connected:  # queued for the connection to come
            again = rtasr.rtasr_write(run, *args)
            if again != rc:
                raise _diverged(run, f"rtasr_write on fd {fd} gives {again}")
        elif rc is not None and rc > 0:
            rtasr.charge_audio(run, fd, entry, rc)  # sent: only the budget remembers it
        elif rc == OVER_BUDGET:
            rtasr.over_budget(run, fd, entry)


def _rtasr_go_live(run: RunContext) -> Rebuilt:
    from spearpy.hostcalls.rtasr import connect

    done = Rebuilt({fd for fd, entry in run.fds.entries() if isinstance(entry, RtAsrFd)})
    for fd in sorted(_state(run).connected):
        entry = run.fds.get(fd, RtAsrFd)
        if entry is None or entry.worker is not None:
            continue
        rc = connect(run, entry)
        if rc != 0:
            done.refused.append(f"fd {fd} (rtasr): it cannot connect again "
                                f"({entry.last_error or abi.ERRNO_NAMES.get(rc, rc)})")
    return done
