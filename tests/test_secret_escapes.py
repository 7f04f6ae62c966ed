"""The API key never reaches anyone in any JSON spelling (issue 14, items 1, 2, 4).

The attack: an upstream (or a proxy) that knows the key writes it into a
reply with some of its characters JSON-escaped (`\\u0073`), in the content,
in an error message, and inside a tool call's `arguments` (JSON in JSON, so
escaped twice), or with an escaped backslash in front of an escape. Every
check decodes what a reader receives level by level and looks for the key.
"""

from __future__ import annotations

import json
import re
import uuid
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spearpy import abi
from spearpy.context import RunOptions
from spearpy.host import Host
from spearpy.observe.events import Event
from spearpy.observe.scrub import REDACTED, SecretScrubber
from spearpy.testing import ScriptedServer
from spearpy.testing.instance import LiveInstance
from tests.probe import Probe, tool_schema, wat_module

KEY = f"sk-escape-{uuid.uuid4().hex}"
_ESCAPE = re.compile(r'\\(?:u([0-9a-fA-F]{4})|(["\\/bfnrt]))')
_SIMPLE = {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r",
           "t": "\t"}


def decodings(text: str, levels: int = 8) -> list[str]:
    """The text and what it becomes after each further level of JSON decoding
    (decoding the whole text at once decodes every string in it)."""
    out = [text]
    for _ in range(levels):
        text = _ESCAPE.sub(lambda m: chr(int(m.group(1), 16)) if m.group(1)
                           else _SIMPLE[m.group(2)], text)
        if text == out[-1]:
            break
        out.append(text)
    return out


def leaks(blob: Any, key: str = KEY) -> bool:
    if isinstance(blob, bytes):
        blob = blob.decode("utf-8", "replace")
    elif not isinstance(blob, str):
        blob = json.dumps(blob, default=str)
    return any(key in level for level in decodings(blob))


def spell(key: str, forms: list[int]) -> str:
    """The key as JSON-string text with character i in form forms[i]:
    0 literal, 1 \\uXXXX, 2 \\uXXXX upper-case hex, 3 an escaped backslash
    (\\u005c) in front of u00XX, which only a second decoding turns into the char."""
    out = []
    for char, form in zip(key, forms, strict=True):
        code = f"{ord(char):04x}"
        out.append([char, "\\u" + code, "\\u" + code.upper(), "\\u005cu" + code][form])
    return "".join(out)


def completion(content_text: str, arguments_text: str | None = None) -> str:
    """A chat completion as wire text; content_text is inserted verbatim
    (already JSON-string text), arguments_text is the arguments string's value."""
    message: dict[str, Any] = {"role": "assistant", "content": "@CONTENT@"}
    if arguments_text is not None:
        message["tool_calls"] = [{"id": "call_1", "type": "function",
                                  "function": {"name": "echo", "arguments": arguments_text}}]
    body = {"id": "c1", "object": "chat.completion", "model": "m",
            "choices": [{"index": 0, "message": message,
                         "finish_reason": "tool_calls" if arguments_text else "stop"}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}
    return json.dumps(body).replace("@CONTENT@", content_text)


# ---- the scrubber on its own --------------------------------------------------

forms_of_key = st.lists(st.integers(0, 3), min_size=len(KEY), max_size=len(KEY))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(forms=forms_of_key, before=st.text(max_size=20), after=st.text(max_size=20))
def test_no_spelling_of_the_key_survives_in_text(forms: list[int], before: str,
                                                 after: str) -> None:
    scrubber = SecretScrubber([KEY])
    spelled = spell(KEY, forms)
    for text in (before + spelled + after, before + spelled.replace("\\", "\\\\") + after):
        assert not leaks(scrubber.text(text)), text


@settings(max_examples=200, deadline=None)
@given(content_forms=forms_of_key, arg_forms=forms_of_key)
def test_no_spelling_survives_a_reply_and_its_arguments(content_forms: list[int],
                                                        arg_forms: list[int]) -> None:
    scrubber = SecretScrubber([KEY])
    arguments = '{"q":"' + spell(KEY, arg_forms) + '"}'
    raw = completion("key: " + spell(KEY, content_forms), arguments).encode()
    assert leaks(raw)  # the attack is real: the reply does spell the key
    body = scrubber.value(json.loads(scrubber.raw(raw)))
    assert not leaks(body)
    assert not leaks(body["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"])


def test_text_around_the_key_is_kept() -> None:
    scrubber = SecretScrubber([KEY])
    spelled = spell(KEY, [1] * len(KEY))
    assert scrubber.text(f"a {spelled} b") == f"a {REDACTED} b"
    raw = completion("x " + spelled + " y").encode()
    body = json.loads(scrubber.raw(raw))
    assert body["choices"][0]["message"]["content"] == f"x {REDACTED} y"
    untouched = completion("plain \\u00e9 text").encode()
    assert scrubber.raw(untouched) == untouched


# ---- end to end: a real upstream, a real guest --------------------------------

def _events_and_probe(host: Host) -> tuple[Probe, list[Event]]:
    events: list[Event] = []
    probe = Probe.__new__(Probe)
    LiveInstance.__init__(probe, host, host.load(wat_module("probe.wat")),
                          RunOptions(capture_output=True, sinks=[events.append]))
    return probe, events


MIXED = [0, 2] * (len(KEY) // 2) + [3] * (len(KEY) % 2)


@pytest.mark.parametrize("forms", [[1] * len(KEY), MIXED, [3] * len(KEY)],
                         ids=["all-escaped", "mixed", "escaped-backslash"])
def test_the_guest_its_tool_events_and_transcript_never_decode_to_the_key(
        forms: list[int], monkeypatch: pytest.MonkeyPatch, make_host: Any) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    spelled = spell(KEY, forms)
    script = {"rules": [
        {"when": {"request_index": 0},
         "reply": {"body_text": completion("calling", '{"q":"' + spelled + '"}')}},
        {"when": {"request_index": 1},
         "reply": {"body_text": completion("the key is " + spelled)}},
        {"when": {"request_index": 2},
         "reply": {"status": 401, "body_text": json.dumps(
             {"error": {"message": "bad key @K@", "code": "invalid_api_key"}}).replace(
                 "@K@", spelled)}},
    ]}
    with ScriptedServer(script, api_key=KEY) as server:
        probe, events = _events_and_probe(make_host(base_url=server.base_url))
        try:
            fd = probe.hc("cchat_create")
            assert probe.write_fn(fd, 0, tool_schema("echo")) == 0
            assert probe.write_msg(fd, "user", "go") == 0
            body = probe.recv(probe.hc("cchat_send", fd, abi.SEND_AUTO_TOOL_CALL))[1]
            error = probe.recv(probe.hc("cchat_send", fd, 0))[1]
            probe.run.close_all_sessions()
            transcripts = probe.run.transcripts
        finally:
            probe.close()
        tool_reply = server.requests[1].body["messages"][-1]
    assert json.loads(body)["choices"][0]["message"]["content"].startswith("the key is ")
    assert tool_reply["role"] == "tool"  # what the echo tool received, sent back
    assert b"upstream_http_error" in error and b"401" in error
    for name, blob in (("body", body), ("tool input", tool_reply), ("error body", error),
                       ("events", [(e.kind, e.data, e.content) for e in events]),
                       ("transcripts", transcripts)):
        assert not leaks(blob), name


def test_a_lone_surrogate_reaches_the_guest_as_a_replacement_character(
        make_host: Any, tmp_path: Path) -> None:
    """Item 4: `\\ud800` used to fail the send with -5, a traceback and a
    0-byte .tmp transcript; now it is U+FFFD, everywhere."""
    script = {"rules": [
        {"when": {"request_index": 0},
         "reply": {"body_text": completion("half \\ud800 a pair \\ud83d\\ude00 low \\udc00",
                                           '{"q":"\\ud800"}')}},
        {"when": {"request_index": 1}, "reply": {"body_text": completion("done \\udfff")}},
    ]}
    from spearpy.observe.transcripts import TranscriptWriter

    writer = TranscriptWriter(tmp_path)
    with ScriptedServer(script) as server:
        host = make_host(base_url=server.base_url)
        probe = Probe.__new__(Probe)
        LiveInstance.__init__(probe, host, host.load(wat_module("probe.wat")),
                              RunOptions(capture_output=True, sinks=[writer]))
        try:
            fd = probe.hc("cchat_create")
            assert probe.write_fn(fd, 0, tool_schema("echo")) == 0
            assert probe.write_msg(fd, "user", "go") == 0
            rfd = probe.hc("cchat_send", fd, abi.SEND_AUTO_TOOL_CALL)
            assert rfd >= abi.FIRST_FD
            body = probe.recv(rfd)[1]
        finally:
            probe.close()
        first_reply = server.requests[1].body["messages"]
    assert json.loads(body)["choices"][0]["message"]["content"] == "done \ufffd"
    assert first_reply[1]["content"] == "half \ufffd a pair \U0001F600 low \ufffd"
    # Arguments reach the tool as the model wrote them: ASCII JSON text whose
    # escape the tool's own parser reads; the host parsed them without failing.
    assert first_reply[2] == {"role": "tool", "tool_call_id": "call_1",
                              "content": '{"q":"\\ud800"}'}
    files = sorted(p.name for p in tmp_path.iterdir())
    assert len(files) == 1 and files[0].endswith(".json"), files  # written, no .tmp left
    record = json.loads((tmp_path / files[0]).read_text("utf-8"))
    assert record["messages"][-1]["content"] == "done \ufffd"


def test_the_cli_survives_a_lone_surrogate_and_writes_its_transcript(tmp_path: Path) -> None:
    import subprocess
    import sys

    script = {"default": {"body_text": completion("odd \\udbff text")}}
    with ScriptedServer(script) as server:
        done = subprocess.run(
            [sys.executable, "-m", "spearpy", "run", "-q", "--no-cache", "--base-url",
             server.base_url, "--model", "m", "--transcript", str(tmp_path / "t"),
             str(Path(__file__).resolve().parents[1] / "wasm-samples" / "c_chat.wasm")],
            capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr and "odd \ufffd text" in done.stdout
    written = list((tmp_path / "t").iterdir())
    assert [p.suffix for p in written] == [".json"], written


def test_a_failed_atomic_write_leaves_neither_file_nor_litter(tmp_path: Path) -> None:
    from spearpy._files import atomic_write

    target = tmp_path / "record.json"
    atomic_write(target, b"old")
    with pytest.raises(TypeError):
        atomic_write(target, "not bytes")  # type: ignore[arg-type]
    assert target.read_bytes() == b"old" and [p.name for p in tmp_path.iterdir()] == [target.name]


def test_a_recorded_cassette_never_decodes_to_the_key(monkeypatch: pytest.MonkeyPatch,
                                                      tmp_path: Path) -> None:
    """The cassette records the wire below the backend, escapes included."""
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    cassette = tmp_path / "run.json"
    spelled = spell(KEY, [1] * len(KEY))
    # Escaped inside the arguments string: still escaped once the body is parsed.
    script = {"default": {"body_text": completion("key " + spelled,
                                                  '{"q":"' + spelled + '"}')}}
    with ScriptedServer(script, api_key=KEY) as server, \
            Host(base_url=server.base_url, model="m", cache_dir=None, max_retries=0,
                 record=cassette) as host:
        result = host.run(Path(__file__).resolve().parents[1] / "wasm-samples" / "c_chat.wasm")
    assert b"[redacted]" in (result.stdout or b"")
    text = cassette.read_text("utf-8")
    assert "<redacted>" in text and not leaks(text)
