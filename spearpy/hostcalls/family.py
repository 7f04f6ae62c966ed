"""A hostcall family: the imports one module implements, as data.

A family names its import module and, for each import, its exact wasm
signature and whether its answer depends on the outside world (a clock,
randomness, a model reply, what a client, a microphone or an ASR server
sent, which fds are ready): those are the answers durable runs journal and
replay; every other hostcall computes the same result from the same guest
memory. Implementations are the functions of `module` named like the
imports. A lazy family's module is imported at the guest's first call of one
of its imports, so a run that never calls it never pays for its imports.

Run hooks: `on_run_start` and `on_run_end` name functions of `module` called
with the run's context when the run starts and ends, for the runs
`applies_to` accepts (lazy families: only those, so their module is not
imported for other runs). Per-run state of a family lives on the context
(`RunContext.state(factory)`), never in a module global.

Durable runs: `on_replayed` ("module:function") names the function called
after each of the family's journaled calls answered from the journal, with
`(run, import_name, args, rc)`: it makes the host state the call would have
built (an fd opened, a source configured) that a resumed run needs once it
goes live, and registers the family's go-live hook (durable/golive.py).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from spearpy import abi
from spearpy._native import I32, I64

if TYPE_CHECKING:
    from spearpy.context import RunContext


@dataclass(frozen=True, slots=True)
class Hostcall:
    params: tuple[str, ...]
    results: tuple[str, ...]
    outside: bool = False  # its answer depends on the outside world
    # Its outside answers are journaled inside it, finer than the call
    # (cchat_send: each completion and tool result, by the driver).
    journaled_inside: bool = False
    # It sets up host state for the fd it names (a mic's source, an rtasr
    # connection) that replaying its answer does not build: its family's
    # go-live hook rebuilds it, or the resume refuses to go live while that
    # fd is open (docs/durable.md).
    sets_up_fd: bool = False
    # It asks and tells the world nothing: it answers with what this process
    # already has (a clock, randomness, a frame, transcript or readiness the
    # world delivered). A journal is written out before a call that asks or
    # tells the world something, not before these (docs/durable.md).
    answers_only: bool = False

    @property
    def journaled(self) -> bool:
        """Journaled whole at this seam: its result and what it wrote."""
        return self.outside and not self.journaled_inside


def i32s(n: int) -> tuple[str, ...]:
    return (I32,) * n


def call(nparams: int, *, outside: bool = False, journaled_inside: bool = False,
         sets_up_fd: bool = False, answers_only: bool = False) -> Hostcall:
    """The usual shape: `nparams` i32 params, one i32 result."""
    return Hostcall(i32s(nparams), (I32,), outside, journaled_inside, sets_up_fd, answers_only)


def read_call(nparams: int) -> Hostcall:
    """An outside call that only answers (Hostcall.answers_only)."""
    return call(nparams, outside=True, answers_only=True)


def call_i64(*, outside: bool = False) -> Hostcall:
    """No params, one i64 result (clocks, randomness: they only answer)."""
    return Hostcall((), (I64,), outside, answers_only=outside)


@dataclass(frozen=True, slots=True)
class HostcallFamily:
    name: str
    module: str  # the implementations, one function per import, named like it
    calls: Mapping[str, Hostcall]
    import_module: str = abi.IMPORT_MODULE
    lazy: bool = False
    # What the guest gets when an implementation fails inside the host.
    on_error: int = abi.EIO
    on_run_start: str | None = None
    on_run_end: str | None = None
    on_replayed: str | None = None  # see the module's docstring
    applies_to: Callable[[RunContext], bool] = field(default=lambda _run: True)
    # Imports it replaces in a module the engine also defines (WASI).
    shadows: bool = False

    def function(self, name: str) -> Callable[..., Any]:
        """The implementation of `name` (imports the module)."""
        fn: Callable[..., Any] = getattr(importlib.import_module(self.module), name)
        return fn

    def replay_hook(self) -> Callable[..., Any] | None:
        """The `on_replayed` function (imports its module), or None."""
        if self.on_replayed is None:
            return None
        module, _, name = self.on_replayed.partition(":")
        fn: Callable[..., Any] = getattr(importlib.import_module(module), name)
        return fn

    def outside_world(self) -> frozenset[str]:
        return frozenset(name for name, hc in self.calls.items() if hc.outside)

    def run_hook(self, which: str | None, run: RunContext) -> None:
        if which is not None and self.applies_to(run):
            self.function(which)(run)
