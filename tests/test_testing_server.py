"""spearpy.testing: the scripted OpenAI-compatible server, exercised over real loopback HTTP."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from spearpy.testing import Script, ScriptedServer, ScriptError

SUM_SCRIPT: dict[str, Any] = {
    "rules": [
        {
            "name": "ask for sum",
            "when": {"tool_messages": 0},
            "reply": {"tool_calls": [{"name": "sum", "arguments": {"a": 7, "b": 35}}]},
        },
        {
            "when": {"last_tool_contains": "42"},
            "reply": {"content": "7 + 35 = {{last_tool}}"},
            "times": 1,
        },
    ],
    "default": {"content": "I have nothing scripted for that."},
}


def user(text: str, model: str = "test-model", **extra: Any) -> dict[str, Any]:
    return {"model": model, "messages": [{"role": "user", "content": text}], **extra}


def with_tool_result(text: str, result: str) -> dict[str, Any]:
    req = user(text)
    req["messages"] += [
        {"role": "assistant", "content": None, "tool_calls": [_call("c1", "sum")]},
        {"role": "tool", "tool_call_id": "c1", "content": result},
    ]
    return req


def _call(call_id: str, name: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": "{}"}}


def message(resp: httpx.Response) -> dict[str, Any]:
    assert resp.status_code == 200, resp.text
    msg: dict[str, Any] = resp.json()["choices"][0]["message"]
    return msg


@pytest.fixture
def serve() -> Iterator[Any]:
    """serve(script, **kw) -> (server, client); everything is stopped at teardown."""
    started: list[tuple[ScriptedServer, httpx.Client]] = []

    def start(script: Any, **kw: Any) -> tuple[ScriptedServer, httpx.Client]:
        server = ScriptedServer(script, **kw).start()
        client = httpx.Client(base_url=server.base_url, timeout=30)
        started.append((server, client))
        return server, client

    yield start
    for server, client in started:
        client.close()
        server.stop()


def post(client: httpx.Client, body: dict[str, Any]) -> httpx.Response:
    return client.post("/chat/completions", json=body)


# ---- rules --------------------------------------------------------------------


def test_readme_script_runs_a_tool_round_trip(serve: Any) -> None:
    server, client = serve(SUM_SCRIPT)
    assert server.base_url.startswith("http://127.0.0.1:")
    assert server.base_url.endswith("/v1")

    first = post(client, user("add 7 and 35"))
    body = first.json()
    assert body["choices"][0]["finish_reason"] == "tool_calls"
    assert body["model"] == "test-model"
    assert body["id"] == "chatcmpl-scripted-0"
    assert body["object"] == "chat.completion"
    assert body["created"] == 1700000000
    call = body["choices"][0]["message"]["tool_calls"][0]
    assert call == {
        "id": "call_0_0",
        "type": "function",
        "function": {"name": "sum", "arguments": '{"a":7,"b":35}'},
    }
    assert body["choices"][0]["message"]["content"] is None

    second = post(client, with_tool_result("add 7 and 35", "42"))
    assert message(second)["content"] == "7 + 35 = 42"
    assert second.json()["choices"][0]["finish_reason"] == "stop"
    assert "tool_calls" not in message(second)


def test_times_exhausts_a_rule_then_falls_through_to_default(serve: Any) -> None:
    server, client = serve(SUM_SCRIPT)
    assert message(post(client, with_tool_result("x", "42")))["content"] == "7 + 35 = 42"
    again = message(post(client, with_tool_result("x", "42")))
    assert again["content"] == "I have nothing scripted for that."
    assert server.script.uses == (0, 1)


def test_rules_are_tried_in_order(serve: Any) -> None:
    _, client = serve(
        [
            {"when": {"last_user_contains": "hello"}, "reply": {"content": "first"}},
            {"when": {"last_user_contains": "hello world"}, "reply": {"content": "second"}},
            {"reply": {"content": "catch-all"}},
        ]
    )
    assert message(post(client, user("hello world")))["content"] == "first"
    assert message(post(client, user("bye")))["content"] == "catch-all"


def test_no_rule_and_no_default_is_a_500_naming_the_problem(serve: Any) -> None:
    _, client = serve([{"when": {"model": "other"}, "reply": {"content": "x"}}])
    resp = post(client, user("hi"))
    assert resp.status_code == 500
    err = resp.json()["error"]
    assert set(err) == {"message", "type", "code"}
    assert "no rule matched" in err["message"]
    assert "no default" in err["message"]
    assert err["code"] == "scripted_no_rule"


def _tools(*names: str) -> list[dict[str, Any]]:
    return [
        {"type": "function", "function": {"name": n, "parameters": {"type": "object"}}}
        for n in names
    ]


CONVERSATION: dict[str, Any] = {
    "model": "gpt-test",
    "messages": [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "what is the weather"},
        {"role": "assistant", "content": None, "tool_calls": [_call("c1", "weather")]},
        {"role": "tool", "tool_call_id": "c1", "content": "sunny, 21C"},
    ],
    "tools": _tools("weather", "clock"),
}


@pytest.mark.parametrize(
    ("when", "holds"),
    [
        ({"tool_messages": 1}, True),
        ({"tool_messages": 0}, False),
        ({"no_tool_message": False}, True),
        ({"no_tool_message": True}, False),
        ({"last_role": "tool"}, True),
        ({"last_role": "user"}, False),
        ({"last_user_contains": "weather"}, True),
        ({"last_user_contains": "sunny"}, False),
        ({"last_tool_contains": "sunny"}, True),
        ({"last_tool_contains": "rain"}, False),
        ({"any_contains": "brief"}, True),
        ({"any_contains": "verbose"}, False),
        ({"has_tools": True}, True),
        ({"has_tools": False}, False),
        ({"tool_names_include": ["clock", "weather"]}, True),
        ({"tool_names_include": ["weather", "email"]}, False),
        ({"model": "gpt-test"}, True),
        ({"model": "gpt-other"}, False),
        ({"request_index": 0}, True),
        ({"request_index": 1}, False),
        ({"tool_messages": 1, "model": "gpt-test", "last_role": "tool"}, True),
        ({"tool_messages": 1, "model": "gpt-other"}, False),
        ({}, True),
    ],
)
def test_each_condition(serve: Any, when: dict[str, Any], holds: bool) -> None:
    _, client = serve({"rules": [{"when": when, "reply": {"content": "matched"}}]})
    resp = post(client, CONVERSATION)
    if holds:
        assert message(resp)["content"] == "matched"
    else:
        assert resp.status_code == 500


def test_conditions_see_bare_tools_and_content_parts(serve: Any) -> None:
    _, client = serve(
        [
            {
                "when": {"tool_names_include": ["bare"], "last_user_contains": "part two"},
                "reply": {"content": "ok"},
            }
        ]
    )
    req = {
        "model": "m",
        "messages": [{"role": "user", "content": [{"type": "text", "text": "part two"}]}],
        "tools": [{"name": "bare", "parameters": {"type": "object"}}],
    }
    assert message(post(client, req))["content"] == "ok"


def test_request_index_counts_answered_requests(serve: Any) -> None:
    _, client = serve(
        {
            "rules": [{"when": {"request_index": 2}, "reply": {"content": "third"}}],
            "default": {"content": "other"},
        }
    )
    answers = [message(post(client, user("x")))["content"] for _ in range(4)]
    assert answers == ["other", "other", "third", "other"]


# ---- rendering ----------------------------------------------------------------


def test_templating_fills_content_and_arguments(serve: Any) -> None:
    _, client = serve(
        [
            {
                "reply": {
                    "content": "model={{model}} user={{ last_user }} tool={{last_tool}} {{other}}",
                    "tool_calls": [{"name": "echo", "arguments": {"text": "{{last_user}}"}}],
                }
            }
        ]
    )
    msg = message(post(client, with_tool_result("ping", "pong")))
    assert msg["content"] == "model=test-model user=ping tool=pong {{other}}"
    assert msg["tool_calls"][0]["function"]["arguments"] == '{"text":"ping"}'


def test_tool_call_ids_arguments_and_types(serve: Any) -> None:
    _, client = serve(
        {
            "rules": [
                {
                    "reply": {
                        "content": "calling",
                        "tool_calls": [
                            {"name": "a", "arguments": {"x": [1, 2], "s": "é"}},
                            {"id": "mine", "name": "b", "arguments": '{"already": "text"}'},
                            {"name": "c", "arguments": {"k": 1}, "raw_arguments": True},
                            {"name": "d", "type": "custom"},
                        ],
                        "finish_reason": "length",
                    }
                }
            ]
        }
    )
    post(client, user("first"))  # request 0
    msg = message(resp := post(client, user("second")))  # request 1: ids use index 1
    calls = msg["tool_calls"]
    assert [c["id"] for c in calls] == ["call_1_0", "mine", "call_1_2", "call_1_3"]
    assert calls[0]["function"]["arguments"] == '{"x":[1,2],"s":"é"}'
    assert calls[1]["function"]["arguments"] == '{"already": "text"}'
    assert calls[2]["function"]["arguments"] == {"k": 1}
    assert calls[3]["type"] == "custom"
    assert calls[3]["function"]["arguments"] == "{}"
    assert msg["content"] == "calling"
    assert resp.json()["choices"][0]["finish_reason"] == "length"


def test_default_usage_is_deterministic_arithmetic(serve: Any) -> None:
    _, client = serve([{"reply": {"content": "x" * 10}}])
    req = {
        "model": "m",
        "messages": [
            {"role": "system", "content": "a" * 17},
            {"role": "user", "content": "b" * 23},
        ],
    }
    usage = post(client, req).json()["usage"]
    assert usage == {"prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 12}
    tiny = post(client, user(""))
    assert tiny.json()["usage"]["completion_tokens"] == 2  # 10 chars // 4
    _, client2 = serve([{"reply": {"content": ""}}])
    assert post(client2, user("")).json()["usage"]["completion_tokens"] == 1  # the minimum


def test_usage_can_be_given_or_left_out(serve: Any) -> None:
    given = {"prompt_tokens": 1000, "completion_tokens": 1, "total_tokens": 1001}
    _, client = serve(
        {
            "rules": [
                {"when": {"request_index": 0}, "reply": {"content": "a", "usage": given}},
                {"when": {"request_index": 1}, "reply": {"content": "b", "usage": None}},
            ]
        }
    )
    assert post(client, user("x")).json()["usage"] == given
    assert "usage" not in post(client, user("x")).json()


def test_identical_request_sequences_give_byte_identical_bodies(serve: Any) -> None:
    requests = [user("add 7 and 35"), with_tool_result("add", "42"), user("again")]
    runs = []
    for _ in range(2):
        _, client = serve(SUM_SCRIPT)
        runs.append([post(client, r).content for r in requests])
    assert runs[0] == runs[1]
    assert len(set(runs[0])) == 3  # and the three answers differ from one another


def test_raw_error_status_and_body_text_replies(serve: Any) -> None:
    raw = {"weird": True, "choices": []}
    _, client = serve(
        [
            {"when": {"request_index": 0}, "reply": {"raw": raw}},
            {
                "when": {"request_index": 1},
                "reply": {"status": 429, "error": "slow down", "headers": {"Retry-After": "7"}},
            },
            {"when": {"request_index": 2}, "reply": {"status": 503}},
            {
                "when": {"request_index": 3},
                "reply": {"status": 400, "error": {"message": "bad", "type": "t", "code": "c"}},
            },
            {"when": {"request_index": 4}, "reply": {"status": 502, "body_text": "<html>502"}},
            {
                "when": {"request_index": 5},
                "reply": {"content": "hi", "headers": {"content-type": "text/event-stream"}},
            },
        ]
    )
    first = post(client, user("x"))
    assert first.status_code == 200
    assert first.json() == raw

    limited = post(client, user("x"))
    assert limited.status_code == 429
    assert limited.headers["retry-after"] == "7"
    assert limited.json() == {
        "error": {"message": "slow down", "type": "requests", "code": "rate_limit_exceeded"}
    }

    unavailable = post(client, user("x"))
    assert unavailable.status_code == 503
    assert unavailable.json()["error"]["type"] == "server_error"

    custom = post(client, user("x"))
    assert custom.json() == {"error": {"message": "bad", "type": "t", "code": "c"}}

    text = post(client, user("x"))
    assert (text.status_code, text.text) == (502, "<html>502")
    assert text.headers["content-type"].startswith("text/plain")

    overridden = post(client, user("x"))
    assert overridden.headers.get_list("content-type") == ["text/event-stream"]


# ---- faults -------------------------------------------------------------------


def _fault_script(fault: str) -> list[dict[str, Any]]:
    return [
        {"when": {"request_index": 0}, "reply": {"content": "fine", "fault": fault}},
        {"reply": {"content": "recovered"}},
    ]


@pytest.mark.parametrize("fault", ["reset", "truncate"])
def test_wire_faults_break_the_request_but_not_the_server(serve: Any, fault: str) -> None:
    server, client = serve(_fault_script(fault))
    with pytest.raises(httpx.TransportError) as info:
        post(client, user("x"))
    if fault == "truncate":
        assert isinstance(info.value, httpx.RemoteProtocolError)
    assert message(post(client, user("x")))["content"] == "recovered"
    assert len(server.requests) == 2


def test_truncate_sends_headers_promising_more_than_it_sends(serve: Any) -> None:
    _, client = serve(_fault_script("truncate"))
    with client.stream("POST", "/chat/completions", json=user("x")) as resp:
        assert resp.status_code == 200
        declared = int(resp.headers["content-length"])
        received = bytearray()
        with pytest.raises(httpx.RemoteProtocolError):
            for chunk in resp.iter_raw():
                received += chunk
    assert 0 < len(received) < declared


def test_garbage_is_a_200_that_is_not_json(serve: Any) -> None:
    _, client = serve(_fault_script("garbage"))
    resp = post(client, user("x"))
    assert resp.status_code == 200
    assert resp.headers["content-type"] == "application/json"
    with pytest.raises(json.JSONDecodeError):
        resp.json()
    assert message(post(client, user("x")))["content"] == "recovered"


def test_delay_outlasts_a_short_client_timeout(serve: Any) -> None:
    server, client = serve(
        [
            {"when": {"request_index": 0}, "reply": {"content": "late", "delay_ms": 60_000}},
            {"when": {"request_index": 1}, "reply": {"content": "soon", "delay_ms": 200}},
        ]
    )
    with pytest.raises(httpx.ReadTimeout):
        client.post("/chat/completions", json=user("x"), timeout=0.2)
    started = time.monotonic()
    assert message(post(client, user("x")))["content"] == "soon"
    assert time.monotonic() - started >= 0.2  # a lower bound only: sleeping never ends early
    server.stop()  # must not wait out the 60 s delay still pending on the first connection
    assert not _server_threads()


# ---- HTTP surface -------------------------------------------------------------


def test_api_key_is_enforced(serve: Any) -> None:
    server, client = serve(SUM_SCRIPT, api_key="sk-secret")
    missing = post(client, user("x"))
    assert missing.status_code == 401
    assert missing.json()["error"]["code"] == "invalid_api_key"
    wrong = client.post(
        "/chat/completions", json=user("x"), headers={"Authorization": "Bearer sk-wrong"}
    )
    assert wrong.status_code == 401
    right = client.post(
        "/chat/completions", json=user("x"), headers={"Authorization": "Bearer sk-secret"}
    )
    assert right.status_code == 200
    assert server.script.request_count == 1  # refused requests never reached the script
    assert [r.headers.get("authorization") for r in server.requests] == [
        None,
        "Bearer sk-wrong",
        "Bearer sk-secret",
    ]


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        (b"{not json", "could not parse"),
        (b"", "empty"),
        (b"\xff\xfe", "could not parse"),
        (b"[1, 2]", "JSON object"),
        (b'{"messages": []}', "model"),
        (b'{"model": "m", "messages": "hi"}', "messages"),
    ],
)
def test_bad_request_bodies_are_400(serve: Any, content: bytes, needle: str) -> None:
    server, client = serve(SUM_SCRIPT)
    resp = client.post("/chat/completions", content=content)
    assert resp.status_code == 400
    assert needle in resp.json()["error"]["message"]
    assert resp.json()["error"]["type"] == "invalid_request_error"
    assert server.script.request_count == 0


def test_models_unknown_paths_and_methods(serve: Any) -> None:
    _, client = serve({"rules": [], "models": ["alpha", "beta"]})
    models = client.get("/models")
    assert [m["id"] for m in models.json()["data"]] == ["alpha", "beta"]
    assert models.json()["object"] == "list"
    nowhere = client.post("/completions", json={})
    assert nowhere.status_code == 404
    assert "Invalid URL" in nowhere.json()["error"]["message"]
    assert client.get("/chat/completions").status_code == 405
    assert client.delete("/models").status_code == 405


def test_requests_are_recorded_and_can_be_cleared(serve: Any) -> None:
    server, client = serve(SUM_SCRIPT)
    post(client, user("one"))
    client.get("/models", headers={"X-Trace": "abc"})
    client.post("/chat/completions", content=b"nope")
    first, second, third = server.requests
    assert (first.method, first.path, first.body) == ("POST", "/v1/chat/completions", user("one"))
    assert first.headers["content-type"] == "application/json"
    assert (second.method, second.path, second.body) == ("GET", "/v1/models", None)
    assert second.headers["x-trace"] == "abc"
    assert third.body is None
    snapshot = server.requests
    server.clear_requests()
    assert server.requests == []
    assert len(snapshot) == 3  # a snapshot, not a live view


def test_chunked_request_body(serve: Any) -> None:
    server, client = serve(SUM_SCRIPT)
    payload = json.dumps(user("chunked")).encode()

    def chunks() -> Iterator[bytes]:
        yield payload[:5]
        yield payload[5:]

    resp = client.post("/chat/completions", content=chunks())
    assert message(resp)["tool_calls"][0]["function"]["name"] == "sum"
    assert server.requests[0].headers["transfer-encoding"] == "chunked"
    assert server.requests[0].body == user("chunked")


def test_keep_alive_reuses_one_connection(serve: Any) -> None:
    server, client = serve(SUM_SCRIPT)
    for _ in range(3):
        post(client, user("x"))
    assert len(server.requests) == 3
    # One connection (so one handler thread, still idle-alive) served all three requests.
    handlers = [t for t in _server_threads() if t.name.startswith("spearpy-scripted-conn-")]
    assert len(handlers) == 1


def test_32_concurrent_clients(serve: Any) -> None:
    server, _ = serve([{"reply": {"content": "echo {{last_user}}", "delay_ms": 50}}])
    n = 32
    barrier = threading.Barrier(n)
    results: dict[int, httpx.Response] = {}
    errors: list[BaseException] = []

    def worker(i: int) -> None:
        try:
            with httpx.Client(base_url=server.base_url, timeout=60) as own:
                barrier.wait()
                results[i] = post(own, user(f"guest {i}"))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert {i: message(r)["content"] for i, r in results.items()} == {
        i: f"echo guest {i}" for i in range(n)
    }
    ids = sorted(int(r.json()["id"].rsplit("-", 1)[1]) for r in results.values())
    assert ids == list(range(n))  # every request got its own index
    assert len(server.requests) == n


# ---- lifecycle ----------------------------------------------------------------


def _server_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("spearpy-scripted")]


def test_stop_closes_idle_keep_alive_connections_and_threads() -> None:
    server = ScriptedServer(SUM_SCRIPT).start()
    url = server.base_url
    client = httpx.Client(base_url=url)
    post(client, user("x"))
    assert _server_threads()  # the acceptor and the idle connection's handler
    server.stop()
    assert _server_threads() == []
    server.stop()  # idempotent
    with pytest.raises(httpx.TransportError):
        post(client, user("x"))
    client.close()
    with pytest.raises(RuntimeError):
        _ = server.base_url


def test_context_manager_and_restart() -> None:
    server = ScriptedServer(SUM_SCRIPT)
    with server:
        with pytest.raises(RuntimeError):
            server.start()
        assert httpx.post(f"{server.base_url}/chat/completions", json=user("x")).status_code == 200
    assert _server_threads() == []
    with server:  # the same object serves again
        assert httpx.get(f"{server.base_url}/models").status_code == 200


# ---- scripts from files and Python --------------------------------------------


def test_script_from_json_file_and_bare_list(serve: Any, tmp_path: Path) -> None:
    path = tmp_path / "script.json"
    path.write_text(json.dumps([{"reply": {"content": "from a file"}}]))
    _, client = serve(str(path))
    assert message(post(client, user("x")))["content"] == "from a file"
    _, client2 = serve(path)
    assert message(post(client2, user("x")))["content"] == "from a file"


def test_callables_for_when_and_reply(serve: Any) -> None:
    seen: list[dict[str, Any]] = []

    def reply(req: dict[str, Any]) -> dict[str, Any]:
        seen.append(req)
        return {"content": f"{len(req['messages'])} messages, {{{{model}}}}"}

    _, client = serve(
        {
            "rules": [
                {"when": lambda req: req.get("temperature") == 0, "reply": {"content": "cold"}},
                {"reply": reply},
            ]
        }
    )
    assert message(post(client, user("x", temperature=0)))["content"] == "cold"
    assert message(post(client, user("x")))["content"] == "1 messages, test-model"
    assert seen == [user("x")]


def test_broken_callables_answer_500_naming_the_rule(serve: Any) -> None:
    def boom(req: dict[str, Any]) -> bool:
        raise ValueError("kaput")

    _, client = serve(
        [
            {"name": "explodes", "when": {"model": "boom"}, "reply": lambda r: {"bogus": 1}},
            {"name": "raises", "when": boom, "reply": {"content": "never"}},
        ]
    )
    bad_reply = post(client, user("x", model="boom"))
    assert bad_reply.status_code == 500
    assert "'explodes'" in bad_reply.json()["error"]["message"]
    assert "bogus" in bad_reply.json()["error"]["message"]
    raised = post(client, user("x"))
    assert raised.status_code == 500
    assert "'raises'" in raised.json()["error"]["message"]
    assert "kaput" in raised.json()["error"]["message"]


@pytest.mark.parametrize(
    ("script", "needle"),
    [
        ([{"name": "n", "when": {"tool_mesages": 0}, "reply": {}}], "rule 0 ('n'): unknown cond"),
        (
            [{"reply": {}}, {"when": {"tool_messages": "0"}, "reply": {}}],
            "rule 1: when.tool_messages",
        ),
        ([{"reply": {}}, {"when": {"has_tools": 1}, "reply": {}}], "when.has_tools"),
        ([{"reply": {}, "times": -1}], "'times'"),
        ([{"reply": {}, "extra": 1}], "unknown keys ['extra']"),
        ([{"when": {}}], "missing 'reply'"),
        ([{"reply": {"contnet": "x"}}], "unknown reply keys ['contnet']"),
        ([{"reply": {"content": 5}}], "'content'"),
        ([{"reply": {"tool_calls": [{"arguments": {}}]}}], "tool_calls[0]: 'name'"),
        ([{"reply": {"tool_calls": [{"name": "x", "arguments": 3}]}}], "'arguments'"),
        ([{"reply": {"fault": "explode"}}], "'fault'"),
        ([{"reply": {"status": 99}}], "'status'"),
        ([{"reply": {"delay_ms": -5}}], "'delay_ms'"),
        ([{"reply": {"raw": [1]}}], "'raw'"),
        ([{"reply": {"error": 3}}], "'error'"),
        ([{"reply": {"headers": {"Content-Length": "9"}}}], "truncate"),
        ({"rules": [], "default": {"content": 1}}, "default: 'content'"),
        ({"rules": {}}, "'rules' must be a list"),
        ({"rule": []}, "unknown top-level keys ['rule']"),
        ({"rules": [], "models": []}, "'models'"),
        (42, "a path, a dict or a list"),
    ],
)
def test_invalid_scripts_are_refused_with_a_clear_error(script: Any, needle: str) -> None:
    with pytest.raises(ScriptError) as info:
        Script.load(script)
    assert needle in str(info.value)


def test_invalid_script_files_name_the_file(tmp_path: Path) -> None:
    bad_json = tmp_path / "bad.json"
    bad_json.write_text("{")
    with pytest.raises(ScriptError, match=r"bad\.json: not valid JSON"):
        Script.load(bad_json)
    with pytest.raises(ScriptError, match="cannot read"):
        Script.load(tmp_path / "missing.json")
    bad_rule = tmp_path / "rule.json"
    bad_rule.write_text('{"rules": [{"reply": {"status": "x"}}]}')
    with pytest.raises(ScriptError, match=r"rule\.json: rule 0: 'status'"):
        Script.load(bad_rule)


def test_respond_in_process_without_http() -> None:
    script = Script.load(SUM_SCRIPT)
    reply = script.respond(user("add"))
    assert reply.status == 200
    assert reply.fault is None
    assert reply.rule == "rule 0 ('ask for sum')"
    assert reply.body is not None
    assert reply.body["choices"][0]["message"]["tool_calls"][0]["id"] == "call_0_0"
    assert reply.payload() == json.dumps(reply.body, separators=(",", ":")).encode()
    script.reset()
    assert script.respond(user("add")).payload() == reply.payload()
    assert script.respond("not a dict").status == 400


# ---- standalone -----------------------------------------------------------------


def test_python_dash_m_serves_a_script_file(tmp_path: Path) -> None:
    path = tmp_path / "script.json"
    path.write_text(json.dumps(SUM_SCRIPT))
    proc = subprocess.Popen(
        [sys.executable, "-m", "spearpy.testing", str(path), "--port", "0", "--api-key", "k"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        assert proc.stdout is not None
        base_url = proc.stdout.readline().strip()
        assert base_url.startswith("http://127.0.0.1:")
        resp = httpx.post(
            f"{base_url}/chat/completions",
            json=user("x"),
            headers={"Authorization": "Bearer k"},
        )
        assert message(resp)["tool_calls"][0]["function"]["name"] == "sum"
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err


def test_python_dash_m_reports_a_bad_script(tmp_path: Path) -> None:
    path = tmp_path / "script.json"
    path.write_text('[{"reply": {"nope": 1}}]')
    proc = subprocess.run(
        [sys.executable, "-m", "spearpy.testing", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert "unknown reply keys ['nope']" in proc.stderr
