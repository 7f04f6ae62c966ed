"""Prometheus metrics computed from events.

    registry = prometheus_client.CollectorRegistry()
    metrics = Metrics(registry)
    host.run(module, on_event=metrics)        # or FanOut(metrics, ...)
    prometheus_client.generate_latest(registry)

Every counter is a count over events, so `spearpy_tool_calls_total` equals the
number of tool_end events, `spearpy_tool_call_iterations_total` the number of
completion_end events, and so on: the events file and the metrics always agree.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Histogram,
    disable_created_metrics,
    start_http_server,
)
from prometheus_client import write_to_textfile as _write_textfile
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from spearpy import abi
from spearpy.observe import events as ev

if TYPE_CHECKING:
    from spearpy.modcache import ModuleCache

# Completions take from ~100 ms (small model, warm) to minutes (long reasoning).
LATENCY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
# Guest tools are in-process wasm calls: microseconds to the tool deadline.
TOOL_BUCKETS = (0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 30.0)
# Tool names come from the model. Only a registered tool's name (the guest
# chose it, and a session holds few) may become a label value: every other
# name shares this one, or a model inventing names would create a series
# each, for as long as the process lives.
UNKNOWN_TOOL_LABEL = "(unknown)"
_STREAM_KINDS = frozenset({ev.STREAM_OPEN, ev.STREAM_CLOSE, ev.STREAM_SESSION, ev.STREAM_DROP})


class Metrics:
    """An event sink maintaining spearpy's metrics in a prometheus registry.

    Thread-safe (prometheus-client metrics are); one instance can observe any
    number of concurrent runs. Each registry can hold one Metrics."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        # Every counter and histogram would also export a `*_created`
        # timestamp series: half of a metrics file, and nothing a textfile
        # collector or a dashboard uses. The switch is process-wide.
        disable_created_metrics()  # type: ignore[no-untyped-call]
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        self.iterations = Counter("spearpy_tool_call_iterations",
                                  "Completions requested inside sends (tool-loop iterations)",
                                  registry=r)
        self.tool_calls = Counter("spearpy_tool_calls", "Tool calls answered, by tool",
                                  ["tool"], registry=r)
        self.tool_failures = Counter("spearpy_tool_call_failures",
                                     "Tool calls answered with an error, by error code",
                                     ["code"], registry=r)
        self.tool_output_bytes = Counter("spearpy_tool_output_bytes",
                                         "Bytes of output returned by guest tools", registry=r)
        self.completion_latency = Histogram("spearpy_completion_latency_seconds",
                                            "Upstream completion latency, retries included",
                                            buckets=LATENCY_BUCKETS, registry=r)
        self.time_to_first_token = Histogram(
            "spearpy_completion_ttft_seconds",
            "Time to the first token of a streamed completion", buckets=LATENCY_BUCKETS,
            registry=r)
        self.tool_duration = Histogram("spearpy_tool_duration_seconds",
                                       "Guest tool execution time", buckets=TOOL_BUCKETS,
                                       registry=r)
        self.sends = Counter("spearpy_sends", "cchat_send calls, by outcome and error code",
                             ["outcome", "code"], registry=r)
        self.upstream_errors = Counter("spearpy_upstream_errors",
                                       "Failed completions, by HTTP status ('none' = no "
                                       "response: timeout, connection error)",
                                       ["status"], registry=r)
        self.limit_hits = Counter("spearpy_limit_hits", "Loop limits reached, by limit",
                                  ["limit"], registry=r)
        self.tokens = Counter("spearpy_tokens", "Tokens reported by the upstream, by kind",
                              ["kind"], registry=r)
        self.runs = Counter("spearpy_runs", "Guest runs, by outcome", ["outcome"], registry=r)
        # Labels are operator-configured names only (routes, backends): bounded.
        self.routed = Counter("spearpy_routed_completions",
                              "Routed completions, by route ('(none)': no route matched), the "
                              "backend that answered ('(none)': none did) and outcome (ok, "
                              "fallback, error, unavailable)", ["route", "backend", "outcome"],
                              registry=r)
        # User streams (labels are fixed words: bounded).
        self.stream_opens = Counter("spearpy_stream_opens",
                                    "Guest user-stream fds opened, by direction",
                                    ["direction"], registry=r)
        self.stream_sessions = Counter("spearpy_stream_sessions",
                                       "Client stream sessions ended, by client (ws, stdio, "
                                       "api) and how (closed, error, run_ended)",
                                       ["client", "end"], registry=r)
        self.stream_frames = Counter("spearpy_stream_frames",
                                     "SSF frames through ended sessions, by direction (in: "
                                     "client to guest, out: guest to client)", ["direction"],
                                     registry=r)
        self.stream_bytes = Counter("spearpy_stream_bytes",
                                    "SSF frame bytes through ended sessions, by direction",
                                    ["direction"], registry=r)
        self.stream_drops = Counter("spearpy_stream_dropped_frames",
                                    "Frames dropped, by reason (client_gone, malformed)",
                                    ["reason"], registry=r)
        self.stream_backpressure = Counter(
            "spearpy_stream_backpressure",
            "Times a side was held back by a full queue: guest (-EAGAIN writes, counted when "
            "its fd closes) and client (frames its reader waited on)", ["side"], registry=r)
        self._server_lock = threading.Lock()

    def __call__(self, event: ev.Event) -> None:
        data = event.data
        kind = event.kind
        if kind == ev.COMPLETION_END:
            self.iterations.inc()
            self.completion_latency.observe(float(data.get("latency_ms") or 0.0) / 1000.0)
            ttft = data.get("ttft_ms")
            if isinstance(ttft, int | float):
                self.time_to_first_token.observe(ttft / 1000.0)
            if data.get("error") is not None:
                status = data.get("status")
                self.upstream_errors.labels(str(status) if status else "none").inc()
            usage = data.get("usage")
            if isinstance(usage, dict):
                for key in ("prompt_tokens", "completion_tokens"):
                    value = usage.get(key)
                    if isinstance(value, int) and value > 0:
                        self.tokens.labels(key.removesuffix("_tokens")).inc(value)
            route = data.get("route")
            if isinstance(route, dict):
                self.routed.labels(str(route.get("route") or "(none)"),
                                   str(route.get("chosen") or "(none)"),
                                   str(route.get("outcome"))).inc()
        elif kind == ev.TOOL_END:
            error = data.get("error")
            self.tool_calls.labels(_tool_label(data, error)).inc()
            if error is not None:
                self.tool_failures.labels(str(error)).inc()
            self.tool_output_bytes.inc(int(data.get("output_bytes") or 0))
            if data.get("executed", not data.get("cached")):
                self.tool_duration.observe(float(data.get("duration_ms") or 0.0) / 1000.0)
        elif kind == ev.SEND_END:
            self.sends.labels(str(data.get("outcome")), str(data.get("error") or "")).inc()
        elif kind == ev.LIMIT_HIT:
            self.limit_hits.labels(str(data.get("limit"))).inc()
        elif kind == ev.RUN_END:
            self.runs.labels(str(data.get("outcome"))).inc()
        elif kind in _STREAM_KINDS:
            self._stream_event(kind, data)

    def _stream_event(self, kind: str, data: dict[str, Any]) -> None:
        if kind == ev.STREAM_OPEN:
            self.stream_opens.labels(str(data.get("direction"))).inc()
        elif kind == ev.STREAM_CLOSE:
            self.stream_backpressure.labels("guest").inc(int(data.get("eagain_writes") or 0))
        elif kind == ev.STREAM_SESSION and data.get("action") == "close":
            end = "run_ended" if data.get("reason") == "run_ended" else (
                "error" if data.get("error") else "closed")
            self.stream_sessions.labels(str(data.get("client")), end).inc()
            for direction in ("in", "out"):
                self.stream_frames.labels(direction).inc(int(data.get(f"frames_{direction}") or 0))
                self.stream_bytes.labels(direction).inc(int(data.get(f"bytes_{direction}") or 0))
            self.stream_backpressure.labels("client").inc(int(data.get("paused") or 0))
        elif kind == ev.STREAM_DROP:
            self.stream_drops.labels(str(data.get("reason"))).inc(int(data.get("frames") or 0))

    def watch_module_cache(self, cache: ModuleCache) -> None:
        """Export a Host's module cache (`host.modules`): hits, misses and
        evictions as counters, bytes and entries as gauges, read when scraped."""
        self.registry.register(ModuleCacheCollector(cache))

    def write_textfile(self, path: str | os.PathLike[str]) -> None:
        """Write the node_exporter textfile-collector format, atomically."""
        _write_textfile(os.fspath(path), self.registry)

    def serve(self, port: int, addr: str = "127.0.0.1") -> Any:
        """Serve /metrics over HTTP on a daemon thread; returns (server, thread)."""
        with self._server_lock:
            return start_http_server(port, addr=addr, registry=self.registry)


class ModuleCacheCollector(Collector):
    """The module cache's own counts, read at each scrape: loads are not run
    events, and the cache keeps its counts under its lock anyway."""

    def __init__(self, cache: ModuleCache) -> None:
        self._cache = cache

    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        stats = self._cache.stats()
        yield CounterMetricFamily("spearpy_module_cache_hits",
                                  "Module loads answered from the in-memory cache",
                                  value=stats.hits)
        yield CounterMetricFamily("spearpy_module_cache_misses",
                                  "Module loads the in-memory cache could not answer "
                                  "(compiled or read from the disk cache)", value=stats.misses)
        yield CounterMetricFamily("spearpy_module_cache_evictions",
                                  "Modules dropped (or not kept) to stay within "
                                  "module_cache_bytes", value=stats.evictions)
        yield GaugeMetricFamily("spearpy_module_cache_bytes",
                                "Bytes of compiled code the in-memory cache holds",
                                value=stats.bytes)
        yield GaugeMetricFamily("spearpy_module_cache_entries",
                                "Modules the in-memory cache holds", value=stats.entries)


def _tool_label(data: dict[str, Any], error: object) -> str:
    """The tool's name when the event says it names a registered tool: it
    ran (`executed`), or the driver looked it up (`registered`)."""
    name = data.get("name")
    if not isinstance(name, str) or error == abi.TOOL_UNKNOWN or \
            not (data.get("executed") is True or data.get("registered") is True):
        return UNKNOWN_TOOL_LABEL
    return name
