"""Wiring observability to a run from plain options: events file, logs,
metrics, transcripts, live view, OpenTelemetry spans.

Plain Python, so any entry point can use it: the CLI wraps it in click
options (cli/observe_options.py) and turns ObserveSetupError into a usage
error; an embedder or a service catches the error itself.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from spearpy.errors import SpearpyError
from spearpy.observe.events import EventSink, FanOut
from spearpy.observe.live import LiveView
from spearpy.observe.logs import LogSink, configure_logging
from spearpy.observe.redact import Redactor
from spearpy.secret_env import BUILTIN_KEY_ENVS

if TYPE_CHECKING:
    # Sinks load when asked for (in _setup): prometheus-client only with metrics.
    from spearpy.observe.metrics import Metrics

OPTION_NAMES = ("events_file", "transcript_dir", "transcript_max_tool_bytes", "metrics_file",
                "metrics_port", "metrics_addr", "log_format", "log_level", "log_file",
                "log_content", "otel", "otel_spans", "quiet")


class ObserveSetupError(SpearpyError, ValueError):
    """An output that cannot be opened (path, port, missing extra), named."""


class Observability:
    """The sinks asked for by name (the keys of OPTION_NAMES, as `spearpy run`
    takes them), as a single `on_event` callable.

    Use as a context manager: leaving it writes the metrics file, stops the
    metrics server and closes every file."""

    def __init__(self, opts: dict[str, Any], *,
                 api_key_envs: Sequence[str] = BUILTIN_KEY_ENVS,
                 stderr: IO[str] | None = None) -> None:
        self._stderr = stderr if stderr is not None else sys.stderr
        # Every backend's key, not only the default one: a guest may pick any.
        self._key_envs = [*api_key_envs, *BUILTIN_KEY_ENVS]
        self.redactor = Redactor.from_env(self._key_envs)
        self.sink = FanOut()
        # Undone last-in first-out: span exporters flush before their file
        # closes, logging leaves the log file before it closes.
        self._stack = contextlib.ExitStack()
        self.metrics: Metrics | None = None
        self.metrics_port: int | None = None  # the bound port (--metrics-port 0 picks one)
        self._metrics_file: str | None = opts.get("metrics_file")
        try:
            self._setup(opts)
        except BaseException as exc:
            self.close()
            if isinstance(exc, OSError):  # an events, transcript, log or spans path
                raise ObserveSetupError(_os_problem(exc)) from exc
            raise

    def _setup(self, opts: dict[str, Any]) -> None:
        log_content = bool(opts.get("log_content"))
        self._setup_logging(opts)
        if opts.get("events_file"):
            from spearpy.observe.jsonl import JsonlEventWriter

            writer = JsonlEventWriter(opts["events_file"], include_content=log_content,
                                      redactor=self.redactor)
            self._stack.callback(writer.close)
            self.sink.add(writer)
        if opts.get("transcript_dir"):
            from spearpy.observe.transcripts import TranscriptWriter

            self.sink.add(TranscriptWriter(
                opts["transcript_dir"], max_tool_bytes=opts.get("transcript_max_tool_bytes"),
                redactor=Redactor.from_env(self._key_envs, patterns=False)))
        if opts.get("metrics_file"):
            # Refuse a path that cannot exist before the run, not after it.
            Path(opts["metrics_file"]).parent.mkdir(parents=True, exist_ok=True)
        if opts.get("metrics_file") or opts.get("metrics_port") is not None:
            from spearpy.observe.metrics import Metrics

            self.metrics = Metrics()
            self.sink.add(self.metrics)
            if opts.get("metrics_port") is not None:
                self._serve_metrics(self.metrics, opts["metrics_port"],
                                    opts.get("metrics_addr") or "127.0.0.1")
        if opts.get("otel") or opts.get("otel_spans"):
            self._setup_otel(opts.get("otel_spans"))
        live = not opts.get("quiet") and not self._logs_on_stderr
        if live:
            self.sink.add(LiveView(self._stderr))
        # The live view already reports every event the default (warning)
        # console log would: failed sends, limits, the run's end. Both on one
        # stderr would say each twice; chosen log flags always get their lines.
        if not live or opts.get("log_format") or opts.get("log_file") or opts.get("log_level"):
            self.sink.add(LogSink(log_content=bool(opts.get("log_content"))))

    def _setup_logging(self, opts: dict[str, Any]) -> None:
        chosen = bool(opts.get("log_format") or opts.get("log_file"))
        level = opts.get("log_level") or ("info" if chosen else "warning")
        stream = self._stderr
        if opts.get("log_file"):
            path = Path(opts["log_file"])
            path.parent.mkdir(parents=True, exist_ok=True)
            stream = self._stack.enter_context(path.open("a", encoding="utf-8"))
            # structlog would still point at the closed file: later lines go to stderr.
            self._stack.callback(configure_logging, "console", "warning", stream=self._stderr,
                                 redactor=self.redactor)
        # Progress lines and info-level log lines on one stderr would say
        # everything twice: a log on stderr replaces the live view.
        self._logs_on_stderr = stream is self._stderr and level in ("debug", "info")
        # Deferred: a run that logs no line at `level` never loads structlog.
        configure_logging(opts.get("log_format") or "console", level, stream=stream,
                          redactor=self.redactor, defer=True)

    def _serve_metrics(self, metrics: Metrics, port: int, addr: str) -> None:
        try:
            served = metrics.serve(port, addr)
        except OSError as exc:
            raise ObserveSetupError(f"--metrics-port {port}: {exc.strerror or exc}") from exc
        server = served[0] if isinstance(served, tuple) else None
        if server is not None:
            self.metrics_port = int(server.server_port)
            self._stack.callback(server.server_close)
            self._stack.callback(server.shutdown)

    def _setup_otel(self, spans_file: str | None) -> None:
        try:
            from spearpy.observe.otel import OtelSink
            tracer = None
            if spans_file:
                tracer = self._file_tracer(spans_file)
            self.sink.add(OtelSink(tracer))
        except ImportError as exc:
            raise ObserveSetupError(f"{exc}") from exc

    def _file_tracer(self, path: str) -> Any:
        # The [otel] extra is optional: mypy may run where it is not installed.
        from opentelemetry.sdk.resources import (  # type: ignore[import-not-found,unused-ignore]
            Resource,
        )
        from opentelemetry.sdk.trace import (  # type: ignore[import-not-found,unused-ignore]
            TracerProvider,
        )
        from opentelemetry.sdk.trace.export import (  # type: ignore[import-not-found,unused-ignore]
            ConsoleSpanExporter,
            SimpleSpanProcessor,
        )

        target = Path(path)
        out = self._stack.enter_context(target.open("w", encoding="utf-8"))
        provider = TracerProvider(resource=Resource.create({"service.name": "spearpy"}))
        provider.add_span_processor(SimpleSpanProcessor(ConsoleSpanExporter(
            out=out, formatter=lambda span: span.to_json(indent=None) + "\n")))
        self._stack.callback(provider.shutdown)
        return provider.get_tracer("spearpy")

    @property
    def sinks(self) -> list[EventSink]:
        return list(self.sink.sinks)

    def close(self) -> None:
        try:
            if self.metrics is not None and self._metrics_file:
                path, self._metrics_file = Path(self._metrics_file), None
                self.metrics.write_textfile(path)
        except OSError as exc:
            # The run is over and its exit code stands; say what was not written.
            print(f"spearpy: metrics file not written: {_os_problem(exc)}", file=self._stderr)
        finally:
            self._stack.close()

    def __enter__(self) -> Observability:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()


def _os_problem(exc: OSError) -> str:
    where = f"{exc.filename}: " if exc.filename else ""
    return f"{where}{exc.strerror or exc}"
