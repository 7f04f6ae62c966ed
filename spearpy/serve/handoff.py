"""Calls from other threads (the store's writer, the runs' threads) run on
the event loop, many per wake-up."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Callable
from typing import Any

_log = logging.getLogger("spearpy.serve")


class LoopHandoff:
    """Calls from other threads run on the loop, many per wake-up: each
    `call_soon_threadsafe` writes the loop's self-pipe and wakes it, and a
    store batch of many runs' events would otherwise cost one wake-up each."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._lock = threading.Lock()
        self._calls: list[tuple[Callable[..., None], tuple[Any, ...]]] = []

    def post(self, fn: Callable[..., None], *args: Any) -> None:
        with self._lock:
            self._calls.append((fn, args))
            if len(self._calls) > 1:
                return  # a wake-up is already on its way and will run this too
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody to tell
            self._loop.call_soon_threadsafe(self._run)

    def _run(self) -> None:
        with self._lock:
            calls, self._calls = self._calls, []
        for fn, args in calls:
            try:
                fn(*args)
            except Exception:  # one subscriber's problem must not drop the others' events
                _log.exception("serve: a hand-off to the event loop failed")
