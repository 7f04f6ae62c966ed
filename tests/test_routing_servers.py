"""Routing against loopback OpenAI-compatible servers (and the Anthropic fake):
aliases, fallback, distributions, circuit breakers, locked routes, and the
routing record in events, transcripts and metrics."""

from __future__ import annotations

import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import generate_latest

from spearpy.host import Host
from spearpy.observe.metrics import Metrics
from tests.test_routing_kit import Guest, content, guests, refused_url, routing_config

__all__ = ["guests"]

OK = [{"reply": {"content": "{{model}} says hi"}}]


def named(server_content: str) -> list[dict[str, Any]]:
    return [{"reply": {"content": server_content}}]


def test_an_alias_remaps_a_hard_coded_model(scripted: Any, guests: Any, tmp_path: Path) -> None:
    # A local server that serves only its own model name, as Ollama does.
    server = scripted({"rules": [{"when": {"model": "qwen2.5:7b"},
                                  "reply": {"content": "qwen here"}}],
                       "default": {"status": 400, "error": "no such model"}})
    path = routing_config(tmp_path / "c.toml", {"local": {"base_url": server.base_url,
                                                          "model": "qwen2.5:7b"}})
    plain = guests(config_file=path)
    refused = plain.send(model="gpt-4o-mini")  # what SPEAR's samples hard-code
    assert refused["error"]["code"] == "upstream_http_error"
    assert "HTTP 400" in refused["error"]["message"]
    assert plain.routes() == []  # no routing configured: no routing record either

    for guest in (guests(config_file=path, model_aliases={"gpt-4o-mini": "local"}),
                  guests(config_file=path, model_aliases={"gpt-4o-mini": "local:qwen2.5:7b"})):
        body = guest.send(model="gpt-4o-mini")
        assert content(body) == "qwen here" and body["_spear"]["backend"] == "local"
        assert body["_spear"]["model"] == "qwen2.5:7b"
        (record,) = guest.routes()
        assert record["reason"] == "alias" and record["alias"] == "gpt-4o-mini"
        assert record["chosen"] == "local"
    assert [r.body["model"] for r in server.requests] == ["gpt-4o-mini", "qwen2.5:7b",
                                                           "qwen2.5:7b"]


FALLBACK = """
[[routes]]
name = "main"
to = ["first", "second"]
"""


@pytest.mark.parametrize(("first", "falls_back", "tried"), [
    (None, True, {"error": "upstream_unreachable", "status": None}),  # connection refused
    ({"status": 429, "error": "slow down"}, True,
     {"error": "upstream_http_error", "status": 429}),
    ({"status": 500}, True, {"error": "upstream_http_error", "status": 500}),
    ({"status": 503}, True, {"error": "upstream_http_error", "status": 503}),
    ({"status": 400, "error": "bad request"}, False, None),
    ({"status": 404, "error": "no such model"}, False, None),
])
def test_priority_falls_back_on_refused_connections_429_and_5xx_not_on_4xx(
        scripted: Any, guests: Any, tmp_path: Path, first: dict[str, Any] | None,
        falls_back: bool, tried: dict[str, Any] | None) -> None:
    second = scripted(named("second answered"))
    first_url = refused_url() if first is None else scripted([{"reply": first}]).base_url
    path = routing_config(tmp_path / "c.toml", {"first": first_url,
                                                "second": second.base_url}, FALLBACK)
    guest = guests(config_file=path)
    body = guest.send()
    (record,) = guest.routes()
    assert record["route"] == "main" and record["policy"] == "priority"
    assert record["candidates"] == ["first", "second"]
    if falls_back:
        assert content(body) == "second answered" and body["_spear"]["backend"] == "second"
        assert record["tried"] == [{"backend": "first", **(tried or {})}]
        assert record["chosen"] == "second" and record["outcome"] == "fallback"
    else:
        assert body["error"]["code"] == "upstream_http_error"
        assert body["_spear"]["backend"] == "first" and second.requests == []
        assert record["tried"] == [] and record["outcome"] == "error"


def test_fallback_comes_after_the_backends_own_retries(scripted: Any, guests: Any,
                                                       tmp_path: Path) -> None:
    busy = scripted([{"reply": {"status": 429, "headers": {"Retry-After": "0"}}}])
    second = scripted(named("second answered"))
    path = routing_config(tmp_path / "c.toml", {"first": busy.base_url,
                                                "second": second.base_url}, FALLBACK)
    body = guests(config_file=path, max_retries=2).send()
    assert content(body) == "second answered"
    assert len(busy.requests) == 3 and len(second.requests) == 1


def test_every_backend_failing_gives_the_last_error(scripted: Any, guests: Any,
                                                    tmp_path: Path) -> None:
    path = routing_config(tmp_path / "c.toml", {"first": refused_url(),
                                                "second": refused_url()}, FALLBACK)
    guest = guests(config_file=path)
    body = guest.send()
    assert body["error"]["code"] == "upstream_unreachable"
    (record,) = guest.routes()
    assert [t["backend"] for t in record["tried"]] == ["first", "second"]
    assert record["chosen"] is None and record["outcome"] == "error"


@pytest.mark.parametrize(("policy", "sends", "expected"), [
    ('policy = "round_robin"', 30, {"a": 10, "b": 10, "c": 10}),
    ('policy = "weighted"\nweights = [1, 3, 0.5]', 45, {"a": 10, "b": 30, "c": 5}),
])
def test_distributions_over_many_sends(scripted: Any, guests: Any, tmp_path: Path,
                                       policy: str, sends: int,
                                       expected: dict[str, int]) -> None:
    servers = {name: scripted(named(name)) for name in "abc"}
    path = routing_config(tmp_path / "c.toml", {n: s.base_url for n, s in servers.items()},
                          f'[[routes]]\nname = "spread"\nto = ["a", "b", "c"]\n{policy}\n')
    guest = guests(config_file=path)
    answers = Counter(content(guest.send()) for _ in range(sends))
    assert answers == expected
    assert {n: len(s.requests) for n, s in servers.items()} == expected


def test_ewma_latency_measures_each_then_prefers_the_fastest(scripted: Any, guests: Any,
                                                           tmp_path: Path) -> None:
    slow = scripted([{"reply": {"content": "slow", "delay_ms": 60}}])
    fast = scripted(named("fast"))
    backends = {"slow": slow.base_url, "fast": fast.base_url}
    path = routing_config(tmp_path / "c.toml", backends,
                          '[[routes]]\nname = "r"\nto = ["slow", "fast"]\n'
                          'policy = "ewma_latency"\n')
    guest = guests(config_file=path)
    answers = [content(guest.send()) for _ in range(6)]
    # Each is measured once (unmeasured counts as fastest), then the faster wins.
    assert answers == ["slow", "fast", "fast", "fast", "fast", "fast"]


def test_least_inflight_sends_past_a_backend_that_is_busy(scripted: Any,
                                                          tmp_path: Path) -> None:
    slow = scripted([{"reply": {"content": "slow", "delay_ms": 400}}])
    fast = scripted(named("fast"))
    path = routing_config(tmp_path / "c.toml", {"slow": slow.base_url, "fast": fast.base_url},
                          '[[routes]]\nname = "r"\nto = ["slow", "fast"]\n'
                          'policy = "least_inflight"\n')
    host = Host(config_file=path, cache_dir=None, max_retries=0)
    first, second = Guest(host), Guest(host)
    answers: list[str | None] = []
    try:
        busy = threading.Thread(target=lambda: answers.append(content(first.send())))
        busy.start()
        deadline = time.monotonic() + 10
        while not slow.requests and time.monotonic() < deadline:
            time.sleep(0.01)  # until the slow server holds the first request
        assert content(second.send()) == "fast"  # slow has one in flight, fast none
        busy.join(10)
        assert answers == ["slow"]  # nothing was in flight: the first as listed
        assert content(second.send()) == "slow"  # idle again
    finally:
        first.close()
        second.close()
        host.close()


def test_the_circuit_opens_after_consecutive_failures_and_closes_after_a_trial(
        scripted: Any, guests: Any, tmp_path: Path) -> None:
    flaky = scripted({"rules": [{"reply": {"status": 500}, "times": 2}],
                      "default": {"content": "flaky is back"}})
    backup = scripted(named("backup"))
    path = routing_config(tmp_path / "c.toml", {"flaky": flaky.base_url,
                                                "backup": backup.base_url},
                          FALLBACK.replace('"first", "second"', '"flaky", "backup"')
                          + "[circuit_breaker]\nfailures = 2\ncooldown = 0.5\n")
    guest = guests(config_file=path)
    assert [content(guest.send()) for _ in range(3)] == ["backup"] * 3
    assert len(flaky.requests) == 2  # the third send skipped it: the circuit is open
    third = guest.routes()[2]
    assert third["rejected"][0]["backend"] == "flaky"
    assert third["rejected"][0]["reason"].startswith("circuit open after 2 consecutive failures")
    assert third["tried"] == [] and third["chosen"] == "backup"
    time.sleep(0.6)
    assert content(guest.send()) == "flaky is back"  # the half-open trial succeeded
    assert content(guest.send()) == "flaky is back"  # closed again
    assert len(flaky.requests) == 4


LOCKED = """
[[routes]]
name = "private"
match = { content = ["password", "(?i)\\\\bssn\\\\b"] }
to = ["local"]
lock = LOCK
"""


@pytest.mark.parametrize("lock", [True, False])
def test_a_locked_content_route_beats_the_guests_backend_param(
        scripted: Any, guests: Any, tmp_path: Path, lock: bool) -> None:
    local, hosted = scripted(named("local")), scripted(named("hosted"))
    path = routing_config(tmp_path / "c.toml", {"local": local.base_url,
                                                "hosted": hosted.base_url},
                          LOCKED.replace("LOCK", str(lock).lower()), default="hosted")
    guest = guests(config_file=path)
    assert content(guest.send("what is my SSN?", backend="hosted")) == \
        ("local" if lock else "hosted")
    assert content(guest.send("my password is hunter2")) == "local"  # no param: the route
    assert content(guest.send("nothing private", backend="hosted")) == "hosted"
    assert content(guest.send("nothing private")) == "hosted"
    first = guest.routes()[0]
    assert first["reason"] == ("locked route" if lock else "backend param")
    # Nothing that matched the route went to the hosted server when locked.
    leaked = [r for r in hosted.requests if "SSN" in str(r.body) or "password" in str(r.body)]
    assert leaked == ([] if lock else [hosted.requests[0]])


def test_records_reach_events_transcripts_and_metrics(scripted: Any, guests: Any,
                                                      tmp_path: Path) -> None:
    good = scripted(named("good"))
    path = routing_config(tmp_path / "c.toml", {"down": refused_url(), "good": good.base_url},
                          '[[routes]]\nname = "main"\nto = ["down", "good"]\n')
    guest = guests(config_file=path)
    metrics = Metrics()
    guest.events.clear()
    guest.send()
    guest.send(backend="good")
    for event in guest.events:
        metrics(event)
    main, param = guest.routes()
    assert main["route"] == "main" and main["outcome"] == "fallback"
    assert param == {"route": None, "reason": "backend param", "policy": None,
                     "model": "good-model", "alias": None, "candidates": ["good"],
                     "order": ["good"], "rejected": [], "chosen": "good", "tried": [],
                     "outcome": "ok"}
    transcripts = guest.run.transcripts
    assert [t["routes"] for t in transcripts] == [[main], [param]]
    text = generate_latest(metrics.registry).decode()
    assert 'spearpy_routed_completions_total{backend="good",outcome="fallback",route="main"}' \
           ' 1.0' in text
    assert 'spearpy_routed_completions_total{backend="good",outcome="ok",route="(none)"} 1.0' \
        in text


def test_streaming_and_anthropic_behind_a_route(scripted: Any, guests: Any, tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    claude = scripted(named("claude streamed this"), "anthropic", api_key="sk-ant")
    monkeypatch.setenv("SPEARPY_ROUTING_ANT_KEY", "sk-ant")
    path = routing_config(tmp_path / "c.toml", {
        "down": refused_url(),
        "claude": {"kind": "anthropic", "base_url": claude.base_url,
                   "api_key_env": "SPEARPY_ROUTING_ANT_KEY"}},
        '[[routes]]\nname = "main"\nto = ["down", "claude"]\n')
    guest = guests(config_file=path)
    body = guest.send(params={"stream": True})
    assert content(body) == "claude streamed this" and body["_spear"]["backend"] == "claude"
    tokens = "".join(e.content["text"] for e in guest.events
                     if e.kind == "token" and e.content is not None)
    assert tokens == "claude streamed this"
    assert claude.requests[0].path == "/v1/messages" and claude.requests[0].body["stream"]


def test_a_tool_result_mid_loop_reroutes_the_next_completion(scripted: Any, guests: Any,
                                                             tmp_path: Path) -> None:
    # Both servers script the same conversation: call echo, then answer.
    script = {"rules": [{"when": {"tool_messages": 0},
                         "reply": {"tool_calls": [{"name": "echo", "arguments": {
                             "text": "the password is hunter2"}}]}}],
              "default": {"content": "done by {{model}}"}}
    local, hosted = scripted(script), scripted(script)
    path = routing_config(tmp_path / "c.toml", {"local": local.base_url,
                                                "hosted": hosted.base_url},
                          LOCKED.replace("LOCK", "true"), default="hosted")
    guest = guests(config_file=path)
    body = guest.send("echo something", auto=True, tools=True)
    assert content(body) == "done by local-model" and body["_spear"]["backend"] == "local"
    assert len(hosted.requests) == 1 and len(local.requests) == 1
    assert local.requests[0].body["messages"][-1]["role"] == "tool"
    assert [r["reason"] for r in guest.routes()] == ["default", "locked route"]


def test_a_routed_send_without_any_model_uses_the_servers_only_model(
        scripted: Any, guests: Any, tmp_path: Path) -> None:
    bare = scripted({"rules": OK, "models": ["the-only-one"]})
    path = routing_config(tmp_path / "c.toml", {"down": refused_url(),
                                                "bare": {"base_url": bare.base_url,
                                                         "model": ""}},
                          '[[routes]]\nname = "r"\nto = ["down", "bare"]\n', default="bare")
    guest = guests(config_file=path)
    assert content(guest.send()) == "the-only-one says hi"
    assert guest.routes()[0]["chosen"] == "bare"
