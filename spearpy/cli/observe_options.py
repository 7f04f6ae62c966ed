"""Observability flags of `spearpy run`: events file, logs, metrics, transcripts,
live view, OpenTelemetry spans. The wiring itself is spearpy.observe.setup."""

from __future__ import annotations

from typing import Any

import click

from spearpy.cli.options import BYTES
from spearpy.observe import setup
from spearpy.observe.logs import FORMATS
from spearpy.observe.setup import OPTION_NAMES

_LEVELS = ("debug", "info", "warning", "error")
_OPTIONS: list[tuple[tuple[str, ...], dict[str, Any]]] = [
    (("--events", "events_file"), {"type": click.Path(dir_okay=False),
                                   "help": "write every event as JSON lines to FILE"}),
    (("--transcript", "transcript_dir"), {"type": click.Path(file_okay=False),
                                          "help": "write each session's conversation as JSON "
                                                  "into DIR when it closes"}),
    (("--transcript-max-tool-bytes",), {"type": BYTES,
                                        "help": "cut tool message contents in transcripts to "
                                                "this size (4096, 64KiB), with a marker"}),
    (("--metrics-file",), {"type": click.Path(dir_okay=False),
                           "help": "write Prometheus metrics (textfile collector format) to "
                                   "FILE when the run ends"}),
    (("--metrics-port",), {"type": click.IntRange(0, 65535),
                           "help": "serve Prometheus metrics over HTTP on PORT during the run"}),
    (("--metrics-addr",), {"default": "127.0.0.1", "show_default": True,
                           "help": "address --metrics-port listens on"}),
    (("--log-format",), {"type": click.Choice(FORMATS),
                         "help": "structured log lines on stderr (or --log-file), one per event"}),
    (("--log-level",), {"type": click.Choice(_LEVELS),
                        "help": "[info with --log-format/--log-file, else warning]"}),
    (("--log-file",), {"type": click.Path(dir_okay=False), "help": "append log lines to FILE"}),
    (("--log-content",), {"is_flag": True,
                          "help": "put tool arguments and outputs in logs and the events file "
                                  "(default: only their length and sha256)"}),
    (("--otel",), {"is_flag": True,
                   "help": "emit OpenTelemetry spans to the global tracer provider "
                           "(needs spearpy[otel])"}),
    (("--otel-spans",), {"type": click.Path(dir_okay=False),
                         "help": "write OpenTelemetry spans as JSON lines to FILE "
                                 "(needs spearpy[otel])"}),
    (("--quiet", "-q"), {"is_flag": True, "help": "no progress lines on stderr"}),
]


def observe_options(func: Any) -> Any:
    for decls, kwargs in reversed(_OPTIONS):
        func = click.option(*decls, **kwargs)(func)
    return func


def pop_observe_options(options: dict[str, Any]) -> dict[str, Any]:
    """Take this module's options out of a command's **options."""
    return {name: options.pop(name, None) for name in OPTION_NAMES}


class Observability(setup.Observability):
    """spearpy.observe.setup.Observability whose refusals are click usage errors."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        try:
            super().__init__(*args, **kwargs)
        except setup.ObserveSetupError as exc:
            raise click.UsageError(str(exc)) from exc
