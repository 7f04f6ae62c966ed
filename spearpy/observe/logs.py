"""Structured logs (structlog): JSON or console lines, one per event.

Every line carries `run_id`, `session_fd` and `iteration` (null where they do
not apply), so one `jq 'select(.run_id=="...")'` follows a run. Tool arguments
and outputs appear as {bytes, sha256} unless `log_content` is set, and every
line passes through a Redactor last, whatever its level: a key can only reach
a line by being in one of its values, and that is where it is removed.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import MutableMapping
from typing import IO, Any, TextIO, cast

import structlog
from structlog.typing import EventDict, Processor, WrappedLogger

from spearpy.observe import events as ev
from spearpy.observe.redact import Redactor, digest

CONTEXT_KEYS = ("run_id", "session_fd", "iteration")
FORMATS = ("console", "json")


def _ensure_context(_logger: WrappedLogger, _name: str, event_dict: EventDict) -> EventDict:
    for key in CONTEXT_KEYS:
        event_dict.setdefault(key, None)
    return event_dict


class _Scrub:
    def __init__(self, redactor: Redactor) -> None:
        self._redactor = redactor

    def __call__(self, _logger: WrappedLogger, _name: str, event_dict: EventDict) -> EventDict:
        scrubbed: EventDict = self._redactor.value(dict(event_dict))
        return scrubbed


def configure_logging(fmt: str = "console", level: str | int = "info", *,
                      stream: IO[str] | None = None, redactor: Redactor | None = None,
                      colors: bool | None = None) -> None:
    """Configure structlog process-wide for spearpy's lines.

    `stream` defaults to stderr: stdout belongs to the guest."""
    if fmt not in FORMATS:
        raise ValueError(f"log format must be one of {FORMATS}, got {fmt!r}")
    numeric = level if isinstance(level, int) else logging.getLevelName(level.upper())
    if not isinstance(numeric, int):
        raise ValueError(f"unknown log level {level!r}")
    out = stream if stream is not None else sys.stderr
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
        _Scrub(redactor or Redactor.from_env()),
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
        self._log = logger if logger is not None else structlog.get_logger("spearpy")

    def __call__(self, event: ev.Event) -> None:
        data = dict(event.data)
        self._bind(event, data)
        fields: MutableMapping[str, Any] = {"run_id": event.run_id, "session_fd": event.fd,
                                            "iteration": data.pop("iteration", None),
                                            "seq": event.seq, **data}
        content = event.content or {}
        if event.kind == ev.TOOL_START:
            fields["arguments"] = _content_field(content.get("arguments"), self.log_content)
        elif event.kind == ev.TOOL_END:
            fields["output"] = _content_field(content.get("output"), self.log_content)
        level, message = _describe(event)
        getattr(self._log, level)(message, **fields)
        if event.kind == ev.SEND_END:
            structlog.contextvars.unbind_contextvars("session_fd", "iteration")
        elif event.kind == ev.RUN_END:
            structlog.contextvars.unbind_contextvars(*CONTEXT_KEYS)

    @staticmethod
    def _bind(event: ev.Event, data: dict[str, Any]) -> None:
        if event.kind == ev.RUN_START:
            structlog.contextvars.bind_contextvars(run_id=event.run_id)
        elif event.kind == ev.SEND_START:
            structlog.contextvars.bind_contextvars(run_id=event.run_id, session_fd=event.fd,
                                                   iteration=None)
        elif event.kind == ev.COMPLETION_START:
            structlog.contextvars.bind_contextvars(iteration=data.get("iteration"))


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
        case ev.COMPLETION_END:
            return ("warning" if failed else "info"), "completion received"
        case ev.TOOL_START:
            return "info", "tool call started"
        case ev.TOOL_END:
            return ("warning" if failed and not data.get("cached") else "info"), "tool call ended"
        case ev.LIMIT_HIT:
            return "warning", "limit hit"
        case ev.SESSION_CLOSE:
            return "debug", "session closed"
    return "info", event.kind
