"""The sinks one by one: redaction, structured logs, metrics, transcripts, the
live view and OpenTelemetry spans, fed by real runs of the WAT agent."""

from __future__ import annotations

import hashlib
import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click
import httpx
import pytest
import structlog
from prometheus_client import CollectorRegistry, generate_latest

from spearpy.cli.observe_options import Observability
from spearpy.observe import events as ev
from spearpy.observe.events import Event, FanOut
from spearpy.observe.live import LiveView
from spearpy.observe.logs import LogSink, configure_logging
from spearpy.observe.metrics import Metrics
from spearpy.observe.redact import REDACTED, Redactor, digest
from spearpy.observe.transcripts import TranscriptWriter, truncate_tool_contents
from tests.test_observe_events import MULTI_TOOL_SCRIPT, agent_wasm

SECRET = "sk-unit-test-secret-0123456789abcdef"


@pytest.fixture(autouse=True)
def _reset_structlog() -> Iterator[None]:
    yield
    structlog.reset_defaults()
    structlog.contextvars.clear_contextvars()


def _run(make_host: Any, scripted: Any, sink: Any, script: Any = MULTI_TOOL_SCRIPT,
         wasm: bytes | None = None, **config: Any) -> Any:
    server = scripted(script)
    host = make_host(base_url=server.base_url, **config)
    wasm = wasm or agent_wasm([("user", "go")], ["echo", "stamp"])
    return host.run(wasm, on_event=sink)


# ---- redaction -----------------------------------------------------------------


def test_redactor_removes_known_secrets_bearer_tokens_and_secret_keys() -> None:
    redactor = Redactor([SECRET, "short"])
    text = f"key={SECRET} header=Bearer abcdefghijklmnop other=sk-{'x' * 20} short"
    cleaned = redactor.text(text)
    assert SECRET not in cleaned and "abcdefghijklmnop" not in cleaned
    assert "sk-xxxx" not in cleaned
    assert cleaned.endswith(" short")  # too short to be treated as a secret
    value = redactor.value({"Authorization": "anything", "api_key": "k", "nested": [SECRET],
                            "max_tokens": 5})
    assert value == {"Authorization": REDACTED, "api_key": REDACTED, "nested": [REDACTED],
                     "max_tokens": 5}
    verbatim = Redactor([SECRET], patterns=False)
    assert verbatim.text(f"sk-{'y' * 20} {SECRET}") == f"sk-{'y' * 20} {REDACTED}"


def test_from_env_knows_named_and_credential_like_variables(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MY_VAR", "named-value-123")
    monkeypatch.setenv("OTHER_BACKEND_API_KEY", "other-backend-key-value")
    monkeypatch.setenv("PLAIN_SETTING", "plain-setting-value")
    redactor = Redactor.from_env(["MY_VAR"], patterns=False)
    text = redactor.text("named-value-123 other-backend-key-value plain-setting-value")
    assert text == f"{REDACTED} {REDACTED} plain-setting-value"


def test_digest_is_length_and_short_sha256() -> None:
    assert digest("é") == {"bytes": 2,
                           "sha256": hashlib.sha256("é".encode()).hexdigest()[:12]}
    assert len(digest("x")["sha256"]) == 12 and digest("x") != digest("y")


# ---- logs ----------------------------------------------------------------------


def test_json_logs_carry_context_and_hide_content(make_host: Any, scripted: Any) -> None:
    out = io.StringIO()
    configure_logging("json", "debug", stream=out, redactor=Redactor([SECRET]))
    result = _run(make_host, scripted, LogSink())
    assert result.ok
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    assert lines[0]["event"] == "run started" and lines[-1]["event"] == "run ended"
    assert all(line["run_id"] == result.run_id for line in lines)
    in_send = [line for line in lines if line["event"].startswith(("tool", "completion"))]
    assert in_send and all(line["session_fd"] == 1000 and line["iteration"] >= 1
                           for line in in_send)
    started = [line for line in lines if line["event"] == "tool call started"]
    assert started[0]["arguments"] == digest('{"text":"hello"}')
    assert "hello" not in out.getvalue()


def test_log_content_and_context_for_other_lines(make_host: Any, scripted: Any) -> None:
    out = io.StringIO()
    configure_logging("json", "info", stream=out)
    other: list[Any] = []

    def also_log(event: Event) -> None:
        # Any spearpy line logged on the guest's thread mid-run gets the context.
        if event.kind == ev.TOOL_END:
            structlog.get_logger("spearpy").info("something else")
            other.append(event)

    result = _run(make_host, scripted, FanOut(LogSink(log_content=True), also_log))
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    extra = [line for line in lines if line["event"] == "something else"]
    assert len(extra) == len(other) == 3
    assert all(line["run_id"] == result.run_id and line["session_fd"] == 1000
               and line["iteration"] in (1, 2) for line in extra)
    ended = [line for line in lines if line["event"] == "tool call ended"]
    assert ended[-1]["output"] == '{"ok":true}'
    # Outside a run nothing stale stays bound.
    structlog.get_logger("spearpy").info("after")
    after = json.loads(out.getvalue().splitlines()[-1])
    assert (after["run_id"], after["session_fd"], after["iteration"]) == (None, None, None)


def test_secrets_never_reach_a_log_line_whatever_the_level() -> None:
    out = io.StringIO()
    configure_logging("console", "debug", stream=out, redactor=Redactor([SECRET]), colors=False)
    log = structlog.get_logger("spearpy")
    log.debug("request", headers={"Authorization": f"Bearer {SECRET}"}, url="http://x")
    try:
        raise RuntimeError(f"upstream echoed {SECRET}")
    except RuntimeError:
        log.exception("failed")
    text = out.getvalue()
    assert SECRET not in text and "Bearer" not in text.replace(f"Bearer {REDACTED}", "")
    assert "upstream echoed [redacted]" in text and "RuntimeError" in text


# ---- metrics -------------------------------------------------------------------


def test_metrics_count_failures_by_code_and_upstream_errors_by_status(
        make_host: Any, scripted: Any) -> None:
    script = {"rules": [
        {"when": {"tool_messages": 0},
         "reply": {"tool_calls": [{"name": "boom"}, {"name": "ghost-1"}, {"name": "ghost-2"},
                                  {"name": "echo", "arguments": {"a": 1}}]}},
        {"when": {"tool_messages": 4}, "reply": {"status": 503, "error": "overloaded"}},
    ]}
    registry = CollectorRegistry()
    metrics = Metrics(registry)
    wasm = agent_wasm([("user", "go")], ["echo", "boom"])
    _run(make_host, scripted, metrics, script, wasm)
    value = registry.get_sample_value
    assert value("spearpy_tool_calls_total", {"tool": "boom"}) == 1
    assert value("spearpy_tool_calls_total", {"tool": "(unknown)"}) == 2
    assert value("spearpy_tool_calls_total", {"tool": "ghost-1"}) is None
    assert value("spearpy_tool_call_failures_total", {"code": "tool_exec_failed"}) == 1
    assert value("spearpy_tool_call_failures_total", {"code": "unknown_tool"}) == 2
    assert value("spearpy_tool_output_bytes_total") == len('{"a":1}')
    assert value("spearpy_upstream_errors_total", {"status": "503"}) == 1
    assert value("spearpy_tool_call_iterations_total") == 2
    assert value("spearpy_sends_total", {"outcome": "error", "code": "upstream_http_error"}) == 1
    assert value("spearpy_tool_duration_seconds_count") == 2  # boom and echo ran
    assert value("spearpy_runs_total", {"outcome": "exited"}) == 1


def test_unreachable_upstream_counts_as_status_none(make_host: Any) -> None:
    registry = CollectorRegistry()
    host = make_host(base_url="http://127.0.0.1:9/v1")
    host.run(agent_wasm([("user", "go")], []), on_event=Metrics(registry))
    assert registry.get_sample_value("spearpy_upstream_errors_total", {"status": "none"}) == 1


def test_metrics_over_http_and_as_a_textfile(make_host: Any, scripted: Any,
                                             tmp_path: Path) -> None:
    with Observability({"metrics_port": 0, "metrics_addr": "127.0.0.1",
                        "metrics_file": str(tmp_path / "m" / "spearpy.prom"), "quiet": True},
                       stderr=io.StringIO()) as obs:
        _run(make_host, scripted, obs.sink)
        assert obs.metrics is not None and obs.metrics_port is not None
        page = httpx.get(f"http://127.0.0.1:{obs.metrics_port}/metrics", timeout=10).text
        assert 'spearpy_tool_calls_total{tool="echo"} 2.0' in page
        assert "spearpy_tool_call_iterations_total 3.0" in page
    text = (tmp_path / "m" / "spearpy.prom").read_text()
    assert text == generate_latest(obs.metrics.registry).decode()
    with pytest.raises(httpx.TransportError):
        httpx.get(f"http://127.0.0.1:{obs.metrics_port}/metrics", timeout=2)


# ---- transcripts ---------------------------------------------------------------


def test_truncation_is_explicit_and_utf8_safe() -> None:
    messages = [{"role": "user", "content": "é" * 100},
                {"role": "tool", "tool_call_id": "c1", "content": "é" * 100},
                {"role": "tool", "tool_call_id": "c2", "content": "short"}]
    cut, notes = truncate_tool_contents(messages, 5)
    assert cut[0] == messages[0] and cut[2] == messages[2]
    assert cut[1]["content"].startswith("éé\n[spearpy: truncated, 200 bytes in full, sha256 ")
    assert notes == [{"index": 1, "tool_call_id": "c1", "bytes": 200,
                      "sha256": digest("é" * 100)["sha256"]}]
    assert messages[1]["content"] == "é" * 100  # the input is not modified


def test_transcripts_on_close_and_at_run_end(make_host: Any, scripted: Any,
                                             tmp_path: Path) -> None:
    writer = TranscriptWriter(tmp_path, max_tool_bytes=4, redactor=Redactor([SECRET],
                                                                            patterns=False))
    wasm = agent_wasm([("user", f"my key is {SECRET}")], ["echo", "stamp"],
                      {"api_key": "guest-set-secret", "temperature": 0.5},
                      sends=[[("user", "more")]], close=False)
    result = _run(make_host, scripted, writer, wasm=wasm)
    assert result.ok and len(writer.written) == 1
    record = json.loads(writer.written[0].read_text())
    assert record["params"] == {"api_key": REDACTED, "temperature": 0.5}
    assert record["messages"][0]["content"] == f"my key is {REDACTED}"
    assert record["sends"] == 2 and record["models"] == ["test-model"]
    assert record["tool_calls"] == 3  # the second send's model answers without tools
    assert [t["tool_call_id"] for t in record["truncated"]] == ["call_0_0", "call_1_0",
                                                               "call_1_1"]
    tool_msgs = [m for m in record["messages"] if m["role"] == "tool"]
    assert all("[spearpy: truncated" in m["content"] for m in tool_msgs)
    assert result.transcripts[0]["messages"][0]["content"] == f"my key is {SECRET}"


# ---- live view -----------------------------------------------------------------


def test_live_view_plain_when_not_a_terminal(make_host: Any, scripted: Any) -> None:
    out = io.StringIO()
    script = {"rules": [{"when": {"tool_messages": 0},
                         "reply": {"tool_calls": [{"name": "echo"}, {"name": "boom"}]}}],
              "default": {"content": "ok"}}
    view = LiveView(out)
    assert not view.styled
    _run(make_host, scripted, view, script, agent_wasm([("user", "go")], ["echo", "boom"]))
    lines = out.getvalue().splitlines()
    assert all(line.startswith("spearpy: ") and line.isascii() for line in lines)
    text = out.getvalue()
    assert "iteration 1: asking the model" in text
    assert "calling echo (call_0_0)" in text and "echo done in" in text
    assert "boom failed after" in text and "tool_exec_failed" in text
    assert "send ok: 2 iteration(s), 2 tool call(s)" in text
    assert lines[-1].endswith("ms") and "exited, exit code 0" in lines[-1]


def test_live_view_styled_on_a_terminal(make_host: Any, scripted: Any) -> None:
    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    out = Tty()
    view = LiveView(out)
    assert view.styled
    _run(make_host, scripted, view)
    text = out.getvalue()
    assert "\x1b[" in text and "stamp done in" in text and not text.startswith("spearpy:")


def test_quiet_and_logs_on_stderr_replace_the_live_view() -> None:
    err = io.StringIO()
    with Observability({"quiet": True}, stderr=err) as obs:
        assert not any(isinstance(s, LiveView) for s in obs.sinks)
    with Observability({"log_format": "json"}, stderr=err) as obs:
        assert not any(isinstance(s, LiveView) for s in obs.sinks)
    with Observability({}, stderr=err) as obs:
        assert any(isinstance(s, LiveView) for s in obs.sinks)


# ---- OpenTelemetry -------------------------------------------------------------


def test_otel_spans_follow_genai_conventions(make_host: Any, scripted: Any) -> None:
    pytest.importorskip("opentelemetry.sdk")
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from spearpy.observe.otel import OtelSink

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    script = {"rules": [{"when": {"tool_messages": 0},
                         "reply": {"tool_calls": [{"name": "echo"}, {"name": "boom"}]}}],
              "default": {"content": "ok"}}
    _run(make_host, scripted, OtelSink(provider.get_tracer("test")), script,
         agent_wasm([("user", "go")], ["echo", "boom"]))
    spans = {s.name: s for s in exporter.get_finished_spans()}
    assert set(spans) == {"spearpy.run module.wasm", "invoke_agent module.wasm",
                          "chat test-model", "execute_tool echo", "execute_tool boom"}
    run, send = spans["spearpy.run module.wasm"], spans["invoke_agent module.wasm"]
    chats = [s for s in exporter.get_finished_spans() if s.name == "chat test-model"]
    assert len(chats) == 2
    assert send.parent.span_id == run.context.span_id
    assert all(c.parent.span_id == send.context.span_id for c in chats)
    assert chats[0].attributes["gen_ai.operation.name"] == "chat"
    assert chats[0].attributes["gen_ai.request.model"] == "test-model"
    assert isinstance(chats[0].attributes["gen_ai.usage.input_tokens"], int)
    assert chats[0].attributes["gen_ai.usage.output_tokens"] >= 1
    boom = spans["execute_tool boom"]
    assert boom.parent.span_id == send.context.span_id
    assert boom.attributes["gen_ai.tool.name"] == "boom"
    assert boom.attributes["gen_ai.tool.call.id"] == "call_0_1"
    assert boom.attributes["error.type"] == "tool_exec_failed"
    assert boom.status.status_code.name == "ERROR"
    assert spans["execute_tool echo"].status.status_code.name == "UNSET"
    assert send.attributes["gen_ai.operation.name"] == "invoke_agent"
    assert run.start_time <= send.start_time <= chats[0].start_time
    assert chats[0].end_time <= boom.start_time <= boom.end_time <= send.end_time


def test_the_setup_is_plain_python_for_entry_points_without_click(tmp_path: Path) -> None:
    from spearpy.observe import Observability as PlainObservability
    from spearpy.observe import ObserveSetupError

    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(ObserveSetupError, match="File exists"):
        PlainObservability({"events_file": str(blocker / "events.jsonl"), "quiet": True})
    assert not isinstance(ObserveSetupError("x"), click.UsageError)


def test_metrics_export_no_created_series() -> None:
    metrics = Metrics(CollectorRegistry())
    metrics(Event(ev.TOOL_END, "r", 0, 0.0, 1000, {"name": "echo", "registered": True,
                                                    "duration_ms": 1.0}))
    text = generate_latest(metrics.registry).decode()
    assert "spearpy_tool_calls_total" in text and "_created" not in text
