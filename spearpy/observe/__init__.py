"""Observability: events and the sinks that turn them into logs, metrics,
transcripts, progress lines and spans.

    from spearpy.observe import FanOut, JsonlEventWriter, Metrics, TranscriptWriter
    metrics = Metrics()                      # or Metrics(your CollectorRegistry)
    host.run(module, on_event=FanOut(metrics, JsonlEventWriter("events.jsonl")))

Names are imported on first use: the host core imports `events` only, and
must not pay for rich, prometheus-client or OpenTelemetry (the `[otel]` extra)
unless a sink is actually used.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from spearpy.observe.events import KINDS, Event, EventBus, EventSink, FanOut
    from spearpy.observe.jsonl import JsonlEventWriter, event_record
    from spearpy.observe.live import LiveView
    from spearpy.observe.logs import LogSink, configure_logging
    from spearpy.observe.metrics import Metrics
    from spearpy.observe.otel import OtelSink
    from spearpy.observe.redact import Redactor, digest
    from spearpy.observe.setup import Observability, ObserveSetupError
    from spearpy.observe.transcripts import TranscriptWriter, truncate_tool_contents

_WHERE = {
    "KINDS": "events", "Event": "events", "EventBus": "events", "EventSink": "events",
    "FanOut": "events", "JsonlEventWriter": "jsonl", "event_record": "jsonl",
    "LiveView": "live", "LogSink": "logs", "configure_logging": "logs", "Metrics": "metrics",
    "OtelSink": "otel", "Redactor": "redact", "digest": "redact",
    "Observability": "setup", "ObserveSetupError": "setup",
    "TranscriptWriter": "transcripts", "truncate_tool_contents": "transcripts",
}
__all__ = [
    "KINDS", "Event", "EventBus", "EventSink", "FanOut", "JsonlEventWriter", "LiveView",
    "LogSink", "Metrics", "Observability", "ObserveSetupError", "OtelSink",
    "Redactor", "TranscriptWriter", "configure_logging",
    "digest", "event_record", "truncate_tool_contents",
]


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"spearpy.observe.{module}"), name)
