"""The native Ollama backend (kind `ollama`, SPEAR's `ollama_chat`) against a
real loopback server speaking Ollama's documented `/api/chat`
(tests/ollama_server.py): a real guest's auto tool-call send, the request
translated out and the answer back, NDJSON streaming, errors and retries,
keys, and hostile answers (garbage, an endless line, a stream cut short).

Every test here failed before the kind existed (`kind = "ollama"` was a
config error); the hostile ones were also checked against the bound they
test being taken out.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest

from spearpy.backends.base import CompletionRequest
from spearpy.backends.factory import build_from_spec
from spearpy.backends.httpbackend import HTTPBackend
from spearpy.backends.specs import BackendSpec, HostDefaults
from spearpy.backends.sse import MAX_EVENT_BYTES
from spearpy.chat.protocol import CompletionResult
from tests.ollama_server import OllamaServer, Reply, tool_call
from tests.test_backends_kit import hosts, write_config

__all__ = ["hosts"]  # a fixture used below

ROOT = Path(__file__).resolve().parents[1]
TOOL_SUM = ROOT / "wasm-samples" / "c_tool_sum.wasm"
KEY = "sk-ollama-proxy-7f3c9a"


@pytest.fixture
def ollama() -> Iterator[OllamaServer]:
    with OllamaServer() as server:
        yield server


def _backend(server: OllamaServer, retries: int = 0, **spec: Any) -> HTTPBackend:
    built = build_from_spec("local", BackendSpec(kind="ollama", base_url=server.base_url,
                                                 model="llama3.2", **spec),
                            HostDefaults(max_retries=retries))
    assert isinstance(built, HTTPBackend)
    return built


def _complete(server: OllamaServer, request: CompletionRequest, **spec: Any) -> CompletionResult:
    backend = _backend(server, **spec)
    try:
        return backend.complete(request)
    finally:
        backend.close()


def _ask(text: str = "hi", **fields: Any) -> CompletionRequest:
    return CompletionRequest(model="llama3.2", messages=[{"role": "user", "content": text}],
                             **fields)


# ---- a real guest ------------------------------------------------------------------


def _sum_chat(request: dict[str, Any]) -> Reply:
    messages = request["messages"]
    if not any(m["role"] == "tool" for m in messages):
        return Reply(tool_calls=[tool_call("sum", {"a": 7, "b": 35})])
    return Reply(content="7 + 35 = " + messages[-1]["content"])


def test_tool_sum_guest_runs_its_auto_tool_call_through_native_ollama(
        tmp_path: Path, ollama: OllamaServer, hosts: Any) -> None:
    ollama.chat = _sum_chat
    config = write_config(tmp_path / "c.toml", {"local": {
        "kind": "ollama", "base_url": ollama.base_url, "model": "llama3.2"}}, default="local")
    result = hosts(config_file=config).run(TOOL_SUM)

    out = (result.stdout or b"").decode()
    assert "tool sum(a=7, b=35) -> 42" in out, result.stderr
    assert 'answer: 7 + 35 = {"sum":42}' in out
    assert result.exit_code == 0
    first, second = ollama.chats()
    assert [r.path for r in ollama.requests] == ["/api/chat", "/api/chat"]
    assert first["model"] == "llama3.2" and first["stream"] is False
    assert [t["function"]["name"] for t in first["tools"]] == ["sum"]
    # Out again: the call with its arguments as an object, the result naming its tool.
    assert second["messages"][-2]["tool_calls"] == [tool_call("sum", {"a": 7, "b": 35})]
    assert second["messages"][-1] == {"role": "tool", "content": '{"sum":42}',
                                      "tool_name": "sum"}
    # Ollama gave no id: the guest saw one made up for it.
    ids = [c["id"] for t in result.transcripts for m in t["messages"]
           for c in m.get("tool_calls") or []]
    assert len(ids) == 1 and re.fullmatch(r"call_[0-9a-f]{14}", ids[0]), ids


def test_a_recorded_ollama_run_replays_as_ollama(
        tmp_path: Path, ollama: OllamaServer, hosts: Any) -> None:
    ollama.chat = _sum_chat
    config = write_config(tmp_path / "c.toml", {"local": {
        "kind": "ollama", "base_url": ollama.base_url, "model": "llama3.2"}}, default="local")
    cassette = tmp_path / "run.cassette.json"
    live = hosts(config_file=config, record=str(cassette)).run(TOOL_SUM)
    replaying = hosts(backend=f"replay:{cassette}")
    replayed = replaying.run(TOOL_SUM)
    assert replaying.replay_mismatch() is None and replayed.exit_code == 0
    assert replayed.stdout == live.stdout and b'{"sum":42}' in (live.stdout or b"")
    assert len(ollama.requests) == 2  # the replay asked nothing


# ---- translation ---------------------------------------------------------------------


def test_the_request_is_translated_to_ollamas_shape(ollama: OllamaServer) -> None:
    tools = [{"type": "function", "function": {"name": n, "parameters": {"type": "object"}}}
             for n in ("add", "mul")]
    messages: list[dict[str, Any]] = [
        {"role": "developer", "content": "be brief"},
        {"role": "user", "content": [{"type": "text", "text": "what is "},
                                     {"type": "text", "text": "this?"},
                                     {"type": "image_url",
                                      "image_url": {"url": "data:image/png;base64,iVBORw0K"}}]},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function",
             "function": {"name": "add", "arguments": '{"a":1,"b":2}'}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "3"},
    ]
    params = {"temperature": 0.2, "max_tokens": 64, "stop": "END", "seed": 7,
              "response_format": {"type": "json_object"}, "keep_alive": "5m",
              "tool_choice": {"type": "function", "function": {"name": "mul"}},
              "parallel_tool_calls": True}
    result = _complete(ollama, CompletionRequest(model="llama3.2", messages=messages,
                                                 tools=tools, params=params))
    assert result.error is None
    assert ollama.chats()[0] == {
        "model": "llama3.2",
        "messages": [
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": "what is this?", "images": ["iVBORw0K"]},
            {"role": "assistant", "content": "",
             "tool_calls": [tool_call("add", {"a": 1, "b": 2})]},
            {"role": "tool", "content": "3", "tool_name": "add"},
        ],
        "tools": [tools[1]],  # tool_choice named mul: only mul is offered
        "keep_alive": "5m", "format": "json",
        "options": {"num_predict": 64, "temperature": 0.2, "stop": ["END"], "seed": 7},
        "stream": False,
    }


def test_the_answer_comes_back_as_an_openai_chat_completion(ollama: OllamaServer) -> None:
    ollama.chat = lambda _r: Reply(content="checking", prompt_eval_count=30, eval_count=4,
                                   tool_calls=[tool_call("add", {"a": 1}),
                                               {"id": "own-id", **tool_call("mul", {})}])
    body = _complete(ollama, _ask()).body
    assert body is not None
    message = body["choices"][0]["message"]
    assert message["content"] == "checking"
    assert [(c["function"]["name"], c["function"]["arguments"]) for c in message["tool_calls"]] \
        == [("add", '{"a":1}'), ("mul", "{}")]
    made_up, kept = (c["id"] for c in message["tool_calls"])
    assert kept == "own-id" and made_up.startswith("call_")
    assert body["choices"][0]["finish_reason"] == "tool_calls"
    assert body["usage"] == {"prompt_tokens": 30, "completion_tokens": 4, "total_tokens": 34}
    assert body["object"] == "chat.completion" and body["model"] == "llama3.2"
    assert body["created"] == 1748386497
    # The same answer again (a replay) is the same body, ids included.
    assert _complete(ollama, _ask()).body == body


def test_a_length_stop_is_finish_reason_length(ollama: OllamaServer) -> None:
    ollama.chat = lambda _r: Reply(content="cut", done_reason="length")
    body = _complete(ollama, _ask()).body
    assert body is not None and body["choices"][0]["finish_reason"] == "length"


# ---- streaming -----------------------------------------------------------------------


def test_a_streamed_reply_hands_on_each_piece_and_assembles_the_same_body(
        ollama: OllamaServer) -> None:
    ollama.chat = lambda _r: Reply(content="the sum is 42 indeed",
                                   tool_calls=[tool_call("add", {"a": 40, "b": 2})])
    pieces: list[str] = []
    streamed = _complete(ollama, _ask(stream=True, on_delta=pieces.append))
    plain = _complete(ollama, _ask())
    assert [r["stream"] for r in ollama.chats()] == [True, False]
    assert pieces == ["the ", "sum ", "is ", "42 ", "indeed"]
    assert streamed.error is None and streamed.body is not None and plain.body is not None
    assert streamed.body["choices"] == plain.body["choices"]
    assert streamed.body["usage"] == plain.body["usage"] == {
        "prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18}


def test_a_key_in_a_streamed_reply_never_reaches_the_deltas(
        ollama: OllamaServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OLLAMA_PROXY_KEY", KEY)
    ollama.chat = lambda _r: Reply(content=f"your key is {KEY} ok")
    pieces: list[str] = []
    result = _complete(ollama, _ask(stream=True, on_delta=pieces.append),
                       api_key_env="OLLAMA_PROXY_KEY")
    assert result.body is not None
    assert KEY not in "".join(pieces) and KEY not in json.dumps(result.body)
    assert ollama.requests[0].headers["Authorization"] == f"Bearer {KEY}"


# ---- keys, errors, retries -----------------------------------------------------------


def test_no_key_is_read_or_sent_by_default(
        ollama: OllamaServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    assert _complete(ollama, _ask()).error is None
    assert "Authorization" not in ollama.requests[0].headers
    assert BackendSpec(kind="ollama").key_env() == ""


def test_an_error_status_is_an_upstream_error_with_ollamas_message(
        ollama: OllamaServer) -> None:
    ollama.chat = lambda _r: Reply(status=404, error='model "nope" not found, try pulling it')
    result = _complete(ollama, _ask())
    assert result.body is None and result.error is not None
    assert (result.error.code, result.error.status) == ("upstream_http_error", 404)
    assert 'model "nope" not found' in result.error.message
    assert len(ollama.requests) == 1  # a 404 is not retried


def test_a_503_is_retried_like_the_other_backends(ollama: OllamaServer) -> None:
    answers = iter([Reply(status=503, error="server busy"), Reply(content="fine")])
    ollama.chat = lambda _r: next(answers)
    result = _complete(ollama, _ask(), max_retries=1)
    assert result.error is None and result.body is not None
    assert result.body["choices"][0]["message"]["content"] == "fine"
    assert len(ollama.requests) == 2


def test_a_key_echoed_in_an_error_is_scrubbed(
        ollama: OllamaServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OLLAMA_PROXY_KEY", KEY)
    ollama.chat = lambda _r: Reply(status=401, error=f"bad token {KEY}")
    result = _complete(ollama, _ask(), api_key_env="OLLAMA_PROXY_KEY")
    assert result.error is not None and KEY not in result.error.message


# ---- hostile answers -----------------------------------------------------------------


def _raw(status: int, content_type: str, *chunks: bytes) -> Any:
    def send(handler: BaseHTTPRequestHandler) -> None:
        handler.send_response(status)
        handler.send_header("Content-Type", content_type)
        handler.send_header("Connection", "close")
        handler.end_headers()
        for chunk in chunks:
            handler.wfile.write(chunk)
    return send


def test_garbage_json_is_a_bad_json_error(ollama: OllamaServer) -> None:
    ollama.hostile["/api/chat"] = _raw(200, "application/json", b'{"message": {"content": "x"')
    result = _complete(ollama, _ask())
    assert result.error is not None and result.error.code == "upstream_bad_json"


def test_a_json_object_that_is_no_chat_answer_is_refused(ollama: OllamaServer) -> None:
    ollama.hostile["/api/chat"] = _raw(200, "application/json", b'{"message": "hi", "done": 1}')
    result = _complete(ollama, _ask())
    assert result.error is not None and result.error.code == "upstream_bad_response"
    assert "no `message` object" in result.error.message


def test_a_stream_of_garbage_lines_is_refused(ollama: OllamaServer) -> None:
    ollama.hostile["/api/chat"] = _raw(200, "application/x-ndjson",
                                       b"not json\n[1,2]\n\xff\xfe\n{\"mess\n")
    result = _complete(ollama, _ask(stream=True))
    assert result.error is not None and result.error.code == "upstream_bad_response"
    assert "no chat line" in result.error.message


def test_a_stream_cut_before_its_done_line_is_refused(ollama: OllamaServer) -> None:
    line = b'{"message":{"role":"assistant","content":"half an ans"},"done":false}\n'
    ollama.hostile["/api/chat"] = _raw(200, "application/x-ndjson", line)
    result = _complete(ollama, _ask(stream=True))
    assert result.error is not None and result.error.code == "upstream_bad_response"
    assert "ended before its final line" in result.error.message


def test_an_error_line_in_a_stream_ends_it_with_that_error(ollama: OllamaServer) -> None:
    line = b'{"message":{"role":"assistant","content":"so"},"done":false}\n'
    ollama.hostile["/api/chat"] = _raw(200, "application/x-ndjson", line,
                                       b'{"error":"model runner crashed"}\n')
    result = _complete(ollama, _ask(stream=True))
    assert result.error is not None and result.error.message == "model runner crashed"


def test_an_endless_ndjson_line_is_refused_at_the_line_bound(ollama: OllamaServer) -> None:
    sent = [0]

    def endless(handler: BaseHTTPRequestHandler) -> None:
        _raw(200, "application/x-ndjson", b'{"message":{"content":"')(handler)
        block = b"a" * 65536
        # Far past both the line bound and the response cap, so that a client
        # bounding neither still ends (with the wrong error) instead of hanging.
        while sent[0] < 64 << 20:
            handler.wfile.write(block)
            sent[0] += len(block)

    ollama.hostile["/api/chat"] = endless
    result = _complete(ollama, _ask(stream=True))
    assert result.error is not None and result.error.code == "upstream_bad_response", result
    assert f"NDJSON line of more than {MAX_EVENT_BYTES} bytes" in result.error.message
