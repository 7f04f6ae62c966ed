"""Streamed completions: the guest's `stream: true` is honoured upstream, tokens
become events as they arrive, and the guest gets the same assembled body."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spearpy import abi
from spearpy.backends.scripted.streamed import anthropic_events, openai_events
from spearpy.backends.sse import AnthropicStream, OpenAIStream, SSEDecoder
from spearpy.context import RunOptions
from spearpy.host import Host
from spearpy.observe import events as ev
from spearpy.observe.events import Event
from spearpy.testing import ScriptedServer
from spearpy.testing.instance import LiveInstance
from tests.probe import Probe, tool_schema, wat_module

SCRIPT = {"rules": [
    {"when": {"tool_messages": 0},
     "reply": {"content": "let me check", "tool_calls": [
         {"name": "echo", "arguments": {"text": "hello there", "n": 2}},
         {"name": "echo", "arguments": {"text": "again"}}]}},
], "default": {"content": "The answer is: {{last_tool}} and that is all.",
               "usage": {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18}}}


def _probe(host: Host, events: list[Event]) -> Probe:
    probe = Probe.__new__(Probe)
    LiveInstance.__init__(probe, host, host.load(wat_module("probe.wat")),
                          RunOptions(capture_output=True, sinks=[events.append]))
    return probe


def _send(host: Host, stream: bool | None) -> tuple[dict[str, Any], list[Event]]:
    events: list[Event] = []
    probe = _probe(host, events)
    try:
        fd = probe.hc("cchat_create")
        assert probe.write_fn(fd, 0, tool_schema("echo")) == 0
        if stream is not None:
            assert probe.set_param(fd, "stream", stream) == 0
        assert probe.write_msg(fd, "user", "go") == 0
        body = probe.recv_json(probe.hc("cchat_send", fd, abi.SEND_AUTO_TOOL_CALL))
    finally:
        probe.close()
    return body, events


def _comparable(body: dict[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in body.items() if k not in ("_spear", "created", "id")}
    out["_spear"] = {k: v for k, v in body["_spear"].items() if k != "elapsed_ms"}
    return out


@pytest.mark.parametrize("dialect", [None, "anthropic"])
def test_a_streamed_send_gives_the_same_body_and_token_events(dialect: str | None,
                                                              make_host: Any) -> None:
    kind = {"backend": "anthropic"} if dialect else {}
    with ScriptedServer(SCRIPT, dialect=dialect) as server:
        host = make_host(base_url=server.base_url, **kind)
        plain, _ = _send(host, None)
        streamed, events = _send(host, True)
        asked = [r.body for r in server.requests]
    assert [b.get("stream") for b in asked if b is not None] == [None, None, True, True]
    assert _comparable(streamed) == _comparable(plain)
    assert streamed["choices"][0]["message"]["content"] == \
        'The answer is: {"text":"again"} and that is all.'
    tokens = [e for e in events if e.kind == ev.TOKEN]
    by_iteration: dict[int, str] = {}
    for token in tokens:
        assert token.content is not None
        by_iteration[token.data["iteration"]] = \
            by_iteration.get(token.data["iteration"], "") + token.content["text"]
    assert by_iteration == {1: "let me check",
                            2: 'The answer is: {"text":"again"} and that is all.'}
    kinds = [e.kind for e in events]
    first_token = kinds.index(ev.TOKEN)
    assert kinds[first_token - 1] == ev.COMPLETION_START  # between start and end
    assert len(tokens) > 4  # really cut into pieces, not one delta


def test_tokens_arrive_before_the_reply_ends(make_host: Any) -> None:
    paced = {"default": {"content": "one two three four five six", "stream_delay_ms": 150}}
    with ScriptedServer(paced) as server:
        _, events = _send(make_host(base_url=server.base_url), True)
    first = next(e for e in events if e.kind == ev.TOKEN)
    end = next(e for e in events if e.kind == ev.COMPLETION_END)
    # Six more events follow the first token, each 150 ms later: a client that
    # buffered the whole reply would report every token at the end.
    assert end.ts - first.ts > 0.5
    # Time to first token is measured and counted.
    assert 0 < end.data["ttft_ms"] < end.data["latency_ms"] - 500
    from prometheus_client import CollectorRegistry, generate_latest

    from spearpy.observe.metrics import Metrics

    metrics = Metrics(CollectorRegistry())
    for event in events:
        metrics(event)
    assert "spearpy_completion_ttft_seconds_count 1.0" in \
        generate_latest(metrics.registry).decode()


def test_a_secret_split_across_deltas_never_reaches_a_token_event(
        monkeypatch: pytest.MonkeyPatch, make_host: Any) -> None:
    key = f"sk-stream-{uuid.uuid4().hex}"
    monkeypatch.setenv("OPENAI_API_KEY", key)
    script = {"default": {"content": f"the key is {key[:10]} {key} and {key[10:]} ok"}}
    with ScriptedServer(script, api_key=key) as server:
        body, events = _send(make_host(base_url=server.base_url), True)
    text = "".join(e.content["text"] for e in events if e.kind == ev.TOKEN and e.content)
    assert key not in text and "[redacted]" in text and text.endswith(" ok")
    assert key not in json.dumps(body)


# ---- the pieces ----------------------------------------------------------------

COMPLETION = {"id": "c1", "object": "chat.completion", "created": 5, "model": "m",
              "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
                  "role": "assistant", "content": "hi there",
                  "tool_calls": [{"id": "a", "type": "function",
                                  "function": {"name": "f", "arguments": '{"x":1}'}},
                                 {"id": "b", "type": "function",
                                  "function": {"name": "g", "arguments": "{}"}}]}}],
              "usage": {"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3}}


@settings(max_examples=100, deadline=None)
@given(cuts=st.lists(st.integers(1, 40), max_size=60), crlf=st.booleans())
def test_any_cut_of_the_stream_assembles_the_same_body(cuts: list[int], crlf: bool) -> None:
    wire = b"".join(openai_events(COMPLETION, include_usage=True))
    if crlf:
        wire = wire.replace(b"\n", b"\r\n")
    deltas: list[str] = []
    decoder, stream = SSEDecoder(), OpenAIStream(deltas.append)
    at = 0
    for size in cuts:
        for payload in decoder.feed(wire[at:at + size]):
            stream.event(payload)
        at += size
    for payload in decoder.feed(wire[at:]) + decoder.close():
        stream.event(payload)
    assert stream.done and stream.body() == COMPLETION
    assert "".join(deltas) == "hi there"


def test_anthropic_events_assemble_the_message() -> None:
    message = {"id": "m1", "type": "message", "role": "assistant", "model": "claude",
               "content": [{"type": "text", "text": "one two"},
                           {"type": "tool_use", "id": "t1", "name": "f", "input": {"a": [1]}}],
               "stop_reason": "tool_use", "stop_sequence": None,
               "usage": {"input_tokens": 3, "output_tokens": 4}}
    stream = AnthropicStream(None)
    decoder = SSEDecoder()
    for payload in decoder.feed(b"".join(anthropic_events(message))):
        stream.event(payload)
    assert stream.done and stream.body() == message


def test_an_error_event_mid_stream_is_an_error_body(make_host: Any) -> None:
    wire = ('data: {"id":"c","choices":[{"index":0,"delta":{"content":"par"}}]}\n\n'
            'data: {"error":{"message":"overloaded mid-stream"}}\n\n')
    script = {"default": {"body_text": wire,
                          "headers": {"Content-Type": "text/event-stream"}}}
    with ScriptedServer(script) as server:
        body, _ = _send(make_host(base_url=server.base_url), True)
    assert body["error"]["code"] == "upstream_bad_response"
    assert "overloaded mid-stream" in body["error"]["message"]
