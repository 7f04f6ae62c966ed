"""OpenTelemetry spans from events, following the GenAI semantic conventions.

Needs the `[otel]` extra (opentelemetry-api, and -sdk to export anything).

    spearpy.run <module>                  one per run
      invoke_agent <module>               one per cchat_send (the tool loop)
        chat <model>                      one per completion (SpanKind.CLIENT)
        execute_tool <tool>               one per tool call

Spans take their start and end times from the events, so they show what the
run did even though the sink sees each event after the fact. Prompts, tool
arguments and outputs are not recorded: the conventions make content opt-in,
and spearpy's transcripts are the place for it.
"""

from __future__ import annotations

import threading
from typing import Any, cast

from spearpy.observe import events as ev
from spearpy.observe.fields import ToolEnd, ToolStart

# opentelemetry is optional, so its types cannot appear in annotations that
# mypy checks on a machine without the extra.
Span = Any
Tracer = Any

INSTRUMENTATION_NAME = "spearpy"


def _import_trace() -> Any:
    try:
        from opentelemetry import trace  # type: ignore[import-not-found,unused-ignore]
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError("OpenTelemetry spans need the otel extra: "
                          "pip install 'spearpy[otel]'") from exc
    return trace


def _ns(ts: float) -> int:
    return int(ts * 1_000_000_000)


class OtelSink:
    """An event sink turning events into spans on `tracer` (default: the global
    tracer provider's). Thread-safe: runs are told apart by run_id."""

    def __init__(self, tracer: Tracer | None = None, *, provider_name: str = "openai") -> None:
        self._trace = _import_trace()
        self._tracer: Tracer = tracer or self._trace.get_tracer(INSTRUMENTATION_NAME)
        self._provider_name = provider_name
        self._lock = threading.Lock()
        self._runs: dict[str, tuple[Span, str]] = {}
        self._sends: dict[tuple[str, int | None], tuple[Span, str]] = {}
        self._completions: dict[tuple[str, int | None], Span] = {}
        self._tools: dict[tuple[str, str], Span] = {}

    def _start(self, name: str, parent: Span | None, ts: float, kind: Any = None,
               attributes: dict[str, Any] | None = None) -> Span:
        context = self._trace.set_span_in_context(parent) if parent is not None else None
        span: Span = self._tracer.start_span(
            name, context=context, kind=kind or self._trace.SpanKind.INTERNAL,
            attributes=attributes, start_time=_ns(ts))
        return span

    def _end(self, span: Span | None, ts: float, error: Any = None) -> None:
        if span is None:
            return
        if error:
            span.set_attribute("error.type", str(error))
            span.set_status(self._trace.Status(self._trace.StatusCode.ERROR, str(error)))
        span.end(end_time=_ns(ts))

    def __call__(self, event: ev.Event) -> None:
        with self._lock:
            self._handle(event)

    def _handle(self, event: ev.Event) -> None:
        d, run, key = event.data, event.run_id, (event.run_id, event.fd)
        kind = event.kind
        span: Span | None
        if kind == ev.RUN_START:
            module = str(d.get("module") or "module")
            span = self._start(f"spearpy.run {module}", None, event.ts, attributes={
                "spearpy.run_id": run, "spearpy.module.sha256": str(d.get("sha256") or "")})
            self._runs[run] = (span, module)
        elif kind == ev.SEND_START:
            parent, module = self._runs.get(run, (None, "module"))
            attributes = {"gen_ai.operation.name": "invoke_agent",
                          "gen_ai.agent.name": module, "spearpy.session.fd": event.fd or 0,
                          "spearpy.auto_tool_call": bool(d.get("auto"))}
            if d.get("model"):
                attributes["gen_ai.request.model"] = str(d["model"])
            self._sends[key] = (self._start(f"invoke_agent {module}", parent, event.ts,
                                            attributes=attributes), str(d.get("model") or ""))
        elif kind == ev.COMPLETION_START:
            send, model = self._sends.get(key, (None, ""))
            self._completions[key] = self._start(
                f"chat {model}".strip(), send, event.ts, self._trace.SpanKind.CLIENT, {
                    "gen_ai.operation.name": "chat", "gen_ai.provider.name": self._provider_name,
                    "gen_ai.system": self._provider_name, "gen_ai.request.model": model,
                    "spearpy.iteration": int(d.get("iteration") or 0)})
        elif kind == ev.COMPLETION_END:
            span = self._completions.pop(key, None)
            if span is not None:
                _set_usage(span, d.get("usage"))
                if d.get("status"):
                    span.set_attribute("http.response.status_code", int(d["status"]))
            self._end(span, event.ts, d.get("error"))
        elif kind == ev.TOOL_START:
            start = cast(ToolStart, d)
            call_id = start["tool_call_id"]
            self._tools[(run, call_id)] = self._start(
                f"execute_tool {start['name']}", self._send_span(key), event.ts, attributes={
                    "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": start["name"],
                    "gen_ai.tool.call.id": call_id, "gen_ai.tool.type": "function"})
        elif kind == ev.TOOL_END:
            end = cast(ToolEnd, d)
            span = self._tools.pop((run, end["tool_call_id"]), None)
            if span is not None and end["rc"] is not None:
                span.set_attribute("spearpy.tool.rc", int(end["rc"]))
            self._end(span, event.ts, None if end["cached"] else end["error"])
        elif kind == ev.LIMIT_HIT:
            send = self._send_span(key)
            if send is not None:
                send.add_event("spearpy.limit_hit", {"limit": str(d.get("limit")),
                                                     "value": str(d.get("value"))},
                               timestamp=_ns(event.ts))
        elif kind == ev.SEND_END:
            span = self._sends.pop(key, (None, ""))[0]
            if span is not None:
                _set_usage(span, d.get("usage"))
                span.set_attribute("spearpy.iterations", int(d.get("iterations") or 0))
                span.set_attribute("spearpy.tool_calls", int(d.get("tool_calls") or 0))
            self._end(span, event.ts, d.get("error"))
        elif kind == ev.RUN_END:
            entry = self._runs.pop(run, None)
            if entry is not None:
                entry[0].set_attribute("spearpy.outcome", str(d.get("outcome")))
                entry[0].set_attribute("spearpy.exit_code", int(d.get("exit_code") or 0))
            failed = d.get("outcome") not in ("exited", None)
            self._end(entry[0] if entry else None, event.ts, d.get("outcome") if failed else None)

    def _send_span(self, key: tuple[str, int | None]) -> Span | None:
        entry = self._sends.get(key)
        return entry[0] if entry is not None else None


def _set_usage(span: Span, usage: Any) -> None:
    if not isinstance(usage, dict):
        return
    for key, attribute in (("prompt_tokens", "gen_ai.usage.input_tokens"),
                           ("completion_tokens", "gen_ai.usage.output_tokens")):
        if isinstance(usage.get(key), int):
            span.set_attribute(attribute, usage[key])
