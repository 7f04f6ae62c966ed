"""Going live after a replay: host state the journal's answers do not build.

A replayed hostcall returns its journaled answer without running, so the fd
a replayed `mic_ctl` configured has no source, an rtasr fd whose connect was
replayed no connection, and a user stream opened from the journal on a run
without a hub no channel. While the run replays that is right (a replay
opens nothing); when a resumed or forked run goes on live, each family that
set such an fd up rebuilds it (re-opens the source, reconnects, rebinds the
stream) in the hook it registered with `RunJournal.at_go_live`. An fd that
cannot be rebuilt exactly (a live device, no hub to bind a stream to) is a
refusal: the run stops with `replay_mismatch` naming it, never a guest
waiting on an fd that will not deliver.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from spearpy.errors import HostInterrupt
from spearpy.fds.base import Fd
from spearpy.outcome import Outcome

if TYPE_CHECKING:
    from spearpy.context import RunContext


@dataclass
class Rebuilt:
    """What a family's go-live hook did: the fds it answers for (rebuilt, or
    named in `refused`), and why each refused one could not be."""

    handled: set[int] = field(default_factory=set)
    refused: list[str] = field(default_factory=list)


GoLiveHook = Callable[["RunContext"], Rebuilt]


class Unbuilt(Fd):
    """An fd the journal says was opened, held in its place so later fds get
    the numbers they had; nothing can reach it until a go-live hook rebuilds
    it (or refuses). It is never ready, and closing it is as any close."""

    kind = "Replayed"
    __slots__ = ("call",)

    def __init__(self, call: str) -> None:
        super().__init__()
        self.call = call

    def readiness(self) -> int:
        return 0

    def can_change(self) -> bool:
        return False


def refusals(run: RunContext, hooks: list[GoLiveHook], unbuilt: dict[int, str]) -> str:
    """Run each family's hook; the reasons the run cannot go on live, joined
    ("" when it can). `unbuilt`: fds a call marked `sets_up_fd` set up from
    the journal; one still open that no hook answers for is refused, so a
    family without a hook fails loudly rather than hangs."""
    handled: set[int] = set()
    refused: list[str] = []
    for hook in hooks:
        done = hook(run)
        handled |= done.handled
        refused.extend(done.refused)
    refused.extend(f"fd {fd} ({call}) was set up from the journal and nothing rebuilds it"
                   for fd, call in unbuilt.items()
                   if fd not in handled and run.fds.lookup(fd) is not None)
    return "; ".join(refused)


def mismatch(run: RunContext, what: str) -> HostInterrupt:
    """The replay_mismatch a family's replay raises for `what`, naming the
    journal step being answered."""
    reader = run.journal.reader if run.journal is not None else None
    step = reader.next_seq - 1 if reader is not None else 0
    return HostInterrupt(Outcome.REPLAY_MISMATCH, f"journal step {step}: {what}")
