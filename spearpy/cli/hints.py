"""Advice on stderr for mistakes a newcomer makes, as an event sink."""

from __future__ import annotations

import sys
import threading
from typing import IO

from spearpy.observe.events import SEND_START, Event

NO_MODEL_HINT = (
    "spearpy: a send had no model, and the guest got the error no_model. Choose the model "
    "with --model NAME, the environment variable SPEARPY_MODEL=NAME, or `model = \"NAME\"` "
    "in the backend's [backends.NAME] table of the config file (--config, docs/backends.md); "
    "a guest may also set its session's `model` param.")


class NoModelHint:
    """Says once per process how to choose a model when a send went without one."""

    def __init__(self, stream: IO[str] | None = None) -> None:
        self._stream = stream
        self._lock = threading.Lock()
        self.shown = False

    def __call__(self, event: Event) -> None:
        # An empty model on a known backend is exactly the no_model refusal
        # (no backend at all is bad_backend, which names the backend itself).
        if event.kind != SEND_START or event.data.get("model") or not event.data.get("backend"):
            return
        with self._lock:
            if self.shown:
                return
            self.shown = True
        print(NO_MODEL_HINT, file=self._stream or sys.stderr, flush=True)
