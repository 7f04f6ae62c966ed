"""structlog, loaded on first use, with a deferred configuration applied then.

Its own module so that anything may log (the event bus reporting a failed
sink, the host reporting a host bug) without importing the log sinks, which
import the events.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from contextvars import ContextVar
from types import ModuleType
from typing import Any

# A configure_logging(defer=True) not applied yet: (lowest level that makes a
# line, apply). Whatever first needs structlog applies it (`_structlog`).
_deferred: tuple[int, Callable[[], None]] | None = None
_deferred_lock = threading.Lock()
# The context LogSink binds, kept here too: while the configuration is
# deferred structlog is not loaded, and when it arrives mid-run this thread's
# context is bound into structlog's context vars then.
_context: ContextVar[dict[str, Any] | None] = ContextVar("spearpy_log_context", default=None)


def structlog_module() -> ModuleType:
    """structlog, with a deferred configuration applied first."""
    global _deferred
    import structlog

    if _deferred is not None:
        with _deferred_lock:
            pending, _deferred = _deferred, None
        if pending is not None:
            # structlog was not loaded when the deferral was made: a
            # configuration it has now was made later, and the later call wins.
            if not structlog.is_configured():
                pending[1]()
            held = _context.get()
            if held:
                structlog.contextvars.bind_contextvars(**held)
    return structlog


def get_logger(name: str = "spearpy") -> Any:
    """A structlog logger, through the configuration `configure_logging` set
    (also a deferred one)."""
    return structlog_module().get_logger(name)




def deferred() -> tuple[int, Callable[[], None]] | None:
    return _deferred


def set_deferred(value: tuple[int, Callable[[], None]] | None) -> None:
    global _deferred
    with _deferred_lock:
        _deferred = value


def context() -> ContextVar[dict[str, Any] | None]:
    return _context
