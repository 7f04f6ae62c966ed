"""The wasmtime Engine a Host runs guests on: how it is configured, and the
ticker that moves its epoch so running wasm notices deadlines and cancels."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

import wasmtime

if TYPE_CHECKING:
    from spearpy.instance import GuestRun

# Epoch ticks drive deadline and cancel checks inside running wasm: 10 ms
# bounds how late a deadline fires while costing ~100 wakeups a second.
EPOCH_TICK_S = 0.01


def engine_config() -> wasmtime.Config:
    config = wasmtime.Config()
    config.epoch_interruption = True
    config.consume_fuel = True
    # Linear memories grow in place inside their reservation (4 GiB, all a
    # wasm32 memory can address), so a memory's base address is fixed for its
    # life and GuestMemory reads it once instead of before every access.
    config.memory_may_move = False
    return config


class EpochTicker:
    """Every tick moves the engine's epoch (running wasm checks its deadline
    and cancel then) and wakes the waits of cancelled runs: a cancel is an
    Event an embedder sets, which notifies no one by itself. With no run in
    progress it sleeps until `resume` (an idle service or worker Host woke
    100 times a second for nothing)."""

    def __init__(self, engine: wasmtime.Engine, active: set[GuestRun]) -> None:
        self._engine = engine
        self._active = active
        self._stop = threading.Event()
        self._busy = threading.Event()
        self.ticks = 0  # for tests and diagnostics: epochs moved so far
        self._thread = threading.Thread(target=self._tick, name="spearpy-epoch", daemon=True)
        self._thread.start()

    def resume(self) -> None:
        """Called after a run joins `active`: the ticker runs while it does."""
        self._busy.set()

    def _tick(self) -> None:
        while not self._stop.is_set():
            if not self._active:
                # Cleared before the second look: a run added after that look
                # sets it again (resume follows the add), so none is missed.
                self._busy.clear()
                if not self._active:
                    self._busy.wait()
                    continue
            if self._stop.wait(EPOCH_TICK_S):
                return
            self._engine.increment_epoch()
            self.ticks += 1
            try:
                for run in tuple(self._active):  # copied while holding the GIL
                    if run.interrupts.cancel_event.is_set():
                        run.interrupts.waker.wake()
            except RuntimeError:
                pass  # the set changed under a free-threaded build: next tick

    def stop(self) -> None:
        self._stop.set()
        self._busy.set()
