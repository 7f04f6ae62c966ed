"""Structured logs (structlog): JSON or console lines, one per event.

Every line carries `run_id`, `session_fd` and `iteration` (null where they do
not apply), so one `jq 'select(.run_id=="...")'` follows a run. Tool arguments
and outputs appear as {bytes, sha256} unless `log_content` is set, and every
line passes through a Redactor last, whatever its level: a key can only reach
a line by being in one of its values, and that is where it is removed.

structlog is imported on first use: with rich installed it costs ~100 ms of
start-up, and a `spearpy run` that logs nothing must not pay for it (see
`configure_logging(defer=True)`).
"""

from __future__ import annotations

import logging
import sys
from collections.abc import MutableMapping
from types import ModuleType
from typing import IO, TYPE_CHECKING, Any, TextIO, cast

from spearpy._term import block, one_line
from spearpy.observe import events as ev
from spearpy.observe.logger import context, deferred, get_logger, set_deferred, structlog_module
from spearpy.observe.redact import Redactor, digest

if TYPE_CHECKING:
    from structlog.typing import EventDict, Processor, WrappedLogger

CONTEXT_KEYS = ("run_id", "session_fd", "iteration")
FORMATS = ("console", "json")
_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING,
           "error": logging.ERROR}

def _ensure_context(_logger: WrappedLogger, _name: str, event_dict: EventDict) -> EventDict:
    for key in CONTEXT_KEYS:
        event_dict.setdefault(key, None)
    return event_dict


def _terminal_safe(_logger: WrappedLogger, _name: str, event_dict: EventDict) -> EventDict:
    # Console lines go to a terminal and quote other programs' text (an MCP
    # server's stderr, an upstream's error): their escapes are shown, not run.
    # A traceback keeps its lines; JSON lines escape control characters anyway.
    return {key: (block(value) if key == "exception" else one_line(value))
            if isinstance(value, str) else value for key, value in event_dict.items()}


class _Scrub:
    def __init__(self, redactor: Redactor) -> None:
        self._redactor = redactor

    def __call__(self, _logger: WrappedLogger, _name: str, event_dict: EventDict) -> EventDict:
        scrubbed: EventDict = self._redactor.value(dict(event_dict))
        return scrubbed


def configure_logging(fmt: str = "console", level: str | int = "info", *,
                      stream: IO[str] | None = None, redactor: Redactor | None = None,
                      colors: bool | None = None, defer: bool = False) -> None:
    """Configure structlog process-wide for spearpy's lines.

    `stream` defaults to stderr: stdout belongs to the guest. `defer=True`
    keeps structlog unloaded until a line at `level` or above is logged by a
    LogSink or through `get_logger`, and configures it then."""
    if fmt not in FORMATS:
        raise ValueError(f"log format must be one of {FORMATS}, got {fmt!r}")
    numeric = level if isinstance(level, int) else logging.getLevelName(level.upper())
    if not isinstance(numeric, int):
        raise ValueError(f"unknown log level {level!r}")
    out = stream if stream is not None else sys.stderr
    scrub = _Scrub(redactor or Redactor.from_env())

    def apply() -> None:
        _apply(fmt, numeric, out, scrub, colors)

    # Once structlog is loaded there is nothing to save by waiting.
    defer = defer and "structlog" not in sys.modules
    set_deferred((numeric, apply) if defer else None)
    if not defer:
        apply()


def _apply(fmt: str, numeric: int, out: IO[str], scrub: _Scrub, colors: bool | None) -> None:
    import structlog

    renderer: Processor
    if fmt == "json":
        renderer = structlog.processors.JSONRenderer(sort_keys=False, default=str)
    else:
        use_colors = colors if colors is not None else bool(getattr(out, "isatty", bool)())
        renderer = structlog.dev.ConsoleRenderer(
            colors=use_colors, exception_formatter=structlog.dev.plain_traceback)
    processors: list[Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        _ensure_context,
        # Tracebacks become text before the scrub, so a key inside an
        # exception message is removed too.
        structlog.processors.format_exc_info,
        scrub,
        *([] if fmt == "json" else [_terminal_safe]),
        renderer,
    ]
    structlog.configure(
        processors=processors,
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=structlog.WriteLoggerFactory(file=cast(TextIO, out)),
        cache_logger_on_first_use=False,
    )


def _content_field(text: Any, log_content: bool) -> Any:
    if not isinstance(text, str):
        return None
    return text if log_content else digest(text)


class LogSink:
    """An event sink writing one structlog line per event; binds run_id,
    session_fd and iteration as context vars so other spearpy lines logged on
    the guest's thread during the run carry them too."""

    def __init__(self, *, log_content: bool = False, logger: Any | None = None) -> None:
        self.log_content = log_content
        self._log = logger  # None = structlog's "spearpy" logger, fetched when first needed

    def __call__(self, event: ev.Event) -> None:
        data = dict(event.data)
        level, message = _describe(event)
        pending = deferred()
        if pending is not None and self._log is None and _LEVELS[level] < pending[0]:
            _track_context(event, data)  # no line: structlog stays unloaded
            return
        structlog = structlog_module()
        self._bind(structlog, event, data)
        fields: MutableMapping[str, Any] = {"run_id": event.run_id, "session_fd": event.fd,
                                            "iteration": data.pop("iteration", None),
                                            "seq": event.seq, **data}
        content = event.content or {}
        if event.kind == ev.TOOL_START:
            fields["arguments"] = _content_field(content.get("arguments"), self.log_content)
        elif event.kind == ev.TOOL_END:
            fields["output"] = _content_field(content.get("output"), self.log_content)
        log = self._log if self._log is not None else structlog.get_logger("spearpy")
        getattr(log, level)(message, **fields)
        if event.kind == ev.SEND_END:
            structlog.contextvars.unbind_contextvars("session_fd", "iteration")
        elif event.kind == ev.RUN_END:
            structlog.contextvars.unbind_contextvars(*CONTEXT_KEYS)
        _track_context(event, data)

    @staticmethod
    def _bind(structlog: ModuleType, event: ev.Event, data: dict[str, Any]) -> None:
        if event.kind == ev.RUN_START:
            structlog.contextvars.bind_contextvars(run_id=event.run_id)
        elif event.kind == ev.SEND_START:
            structlog.contextvars.bind_contextvars(run_id=event.run_id, session_fd=event.fd,
                                                   iteration=None)
        elif event.kind == ev.COMPLETION_START:
            structlog.contextvars.bind_contextvars(iteration=data.get("iteration"))


def _track_context(event: ev.Event, data: dict[str, Any]) -> None:
    """What LogSink binds, in spearpy's own context var (see logger.py)."""
    _context = context()
    held = _context.get() or {}
    if event.kind == ev.RUN_START:
        _context.set({**held, "run_id": event.run_id})
    elif event.kind == ev.SEND_START:
        _context.set({**held, "run_id": event.run_id, "session_fd": event.fd,
                      "iteration": None})
    elif event.kind == ev.COMPLETION_START:
        _context.set({**held, "iteration": data.get("iteration")})
    elif event.kind == ev.SEND_END and held:
        _context.set({k: v for k, v in held.items() if k not in ("session_fd", "iteration")})
    elif event.kind == ev.RUN_END and held:
        _context.set(None)


def _describe(event: ev.Event) -> tuple[str, str]:
    """(level, message) for an event; trouble is a warning, a failed run an error."""
    data = event.data
    failed = data.get("error") is not None
    match event.kind:
        case ev.RUN_START:
            return "info", "run started"
        case ev.RUN_END:
            ok = data.get("outcome") == "exited"
            return ("info" if ok else "error"), "run ended"
        case ev.SEND_START:
            return "info", "send started"
        case ev.SEND_END:
            return ("warning" if failed else "info"), "send ended"
        case ev.COMPLETION_START:
            return "debug", "completion requested"
        case ev.TOKEN:
            return "debug", "token received"
        case ev.COMPLETION_END:
            return ("warning" if failed else "info"), "completion received"
        case ev.TOOL_START:
            return "info", "tool call started"
        case ev.TOOL_END:
            return ("warning" if failed and not data.get("cached") else "info"), "tool call ended"
        case ev.LIMIT_HIT:
            return "warning", "limit hit"
        case ev.SOURCE_UNAVAILABLE:
            return "warning", "tool source unavailable"
        case ev.SESSION_CLOSE:
            return "debug", "session closed"
        case ev.AUDIO_CLOSE:
            return ("warning" if data.get("last_error") else "debug"), "audio fd closed"
    return "info", event.kind


# Guest levels (spear-abi `log`) to the logging levels structlog filters on.
_GUEST_LEVELS = {"trace": "debug", "debug": "debug", "info": "info", "warn": "warning",
                 "error": "error"}


def log_guest_line(level: str, text: str) -> None:
    """A guest `log` call as one structured line (Host.run's on_guest_log), so
    a JSON log stream stays JSON; the run's context vars come along."""
    getattr(get_logger("spearpy.guest"), _GUEST_LEVELS.get(level, "info"))(
        text, source="guest", guest_level=level)
