"""The journal's record format: every kind round-trips, the stored forms
cannot pose as one another, secrets never reach the bytes, and a replay that
asks differently is stopped at the step, naming the first difference."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import struct
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from spearpy.journal import (
    KINDS,
    End,
    FileJournalStore,
    JournalCorrupt,
    JournalError,
    JournalReader,
    JournalWriter,
    ReplayDiverged,
    Start,
    Step,
    decode,
    encode,
)
from spearpy.journal.records import (
    REQUEST_INLINE_MAX,
    Codec,
    hostcall_answer,
    hostcall_writes,
    make_step,
)
from spearpy.observe.scrub import SecretScrubber

NO_SECRETS = SecretScrubber()


def hostcall(call: str, *args: int, rc: int | None = 0,
             writes: tuple[tuple[int, bytes], ...] = (), t: float = 0.0) -> tuple[Any, Any]:
    """A hostcall step's (request, answer), as the hostcall-family seam makes them."""
    return {"call": call, "args": list(args)}, hostcall_answer(rc, writes, t, NO_SECRETS)


# What the outside world answers through hostcalls, one of each shape: a value
# returned, bytes written (one or several writes), no return value at all.
HOSTCALLS: dict[str, tuple[Any, Any]] = {
    "time_now_ms": hostcall("system.time_now_ms", rc=1_717_171_717_171, t=0.25),
    "wall_time_s": hostcall("system.wall_time_s", rc=1_717_171_717),
    "random_i64": hostcall("system.random_i64", rc=-(1 << 63)),
    "clock_time_get": hostcall("wasi.clock_time_get", 1, 1000, 4096,
                               writes=((4096, (123_456_789_000).to_bytes(8, "little")),)),
    "random_get": hostcall("wasi.random_get", 4096, 6, writes=((4096, b"\x00\xff\n{\"x"),)),
    "epoll_wait": hostcall("fd.spear_epoll_wait", 7, 8192, 4, 100, rc=2,
                           writes=((8192, struct.pack("<4I", 5, 1, 9, 4)),),
                           t=1234.5),
    "stream_read": hostcall("user_streams.user_stream_read", 11, 4096, 64, rc=7,
                            writes=((4096, b"\x01\x02frame"),)),
    "mic_read": hostcall("mic.mic_read", 12, 4096, 4, rc=4,
                         writes=((4096, b"\x00\x01\x00\x02"),)),
    "rtasr_read": hostcall("rtasr.rtasr_read", 13, 4096, 8192, rc=0, writes=(
        (4096, b'{"type":"transcript.delta","text":"hel"}'), (8192, (40).to_bytes(4, "little")))),
    "sleep_ms": hostcall("system.sleep_ms", 50, rc=None),
}

# A representative (request, answer) per kind, as the seam will pass them.
SAMPLES: dict[str, tuple[Any, Any]] = {
    "hostcall": HOSTCALLS["random_get"],
    "chat.completion": ({"model": "m", "messages": [{"role": "user", "content": "hi"}]},
                        {"choices": [{"message": {"role": "assistant", "content": "héllo\n"}}],
                         "usage": {"total_tokens": 3}}),
    "tool.outcome": ({"source": "mcp:calc", "name": "add", "arguments": {"a": 1, "b": 2}},
                     {"ok": True, "output": "3"}),
    "guest_tool.output": ({"name": "lookup", "arguments": {"q": "x"}}, "the guest's output"),
}


def test_every_kind_has_a_sample() -> None:
    assert set(SAMPLES) == set(KINDS)


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_each_kind_round_trips(kind: str) -> None:
    request, answer = SAMPLES[kind]
    step = make_step(4, kind, request, answer, NO_SECRETS)
    line = encode(step)
    assert b"\n" not in line and line.isascii()
    assert decode(line) == step
    if KINDS[kind].answer is not Codec.DIGEST:
        assert step.answer == answer  # stored as given


@pytest.mark.parametrize("name", sorted(HOSTCALLS))
def test_each_hostcall_round_trips(name: str) -> None:
    request, answer = HOSTCALLS[name]
    step = make_step(4, "hostcall", request, answer, NO_SECRETS)
    line = encode(step)
    assert b"\n" not in line and line.isascii()
    decoded = decode(line)
    assert decoded == step
    assert isinstance(decoded, Step) and decoded.request == request
    assert (decoded.answer["rc"], decoded.answer["t"]) == (answer["rc"], answer["t"])
    assert hostcall_writes(decoded.answer) == [
        (address, base64.b64decode(text)) for address, text in answer["writes"]]


def test_start_and_end_round_trip() -> None:
    start = Start.of_run(module=b"\0asm\1\0\0\0", argv=["agent", "--x", "ü"],
                         env={"HOME": "/root", "OPENAI_API_KEY": "sk-value"}, stdin=b"in\0put",
                         limits={"timeout_s": 30.0}, flags={"model": "m", "stream": False},
                         scrubber=NO_SECRETS)
    assert decode(encode(start)) == start
    assert start.env_names == ("HOME", "OPENAI_API_KEY")
    assert b"sk-value" not in encode(start)  # names, never values
    assert start.stdin_sha256 == hashlib.sha256(b"in\0put").hexdigest()
    end = End(9, "exited", 3)
    assert decode(encode(end)) == end


def test_the_format_is_pinned() -> None:
    """The bytes a journal holds are the contract with journals already written."""
    step = make_step(2, "tool.outcome", {"source": "py", "name": "add", "arguments": {"a": 1}},
                     {"ok": True}, NO_SECRETS)
    digest = hashlib.sha256(b'{"a":1}').hexdigest()
    assert encode(step) == (b'{"seq":2,"kind":"tool.outcome","request":{"source":"py",'
                            b'"name":"add","arguments_sha256":"' + digest.encode() +
                            b'"},"answer":{"ok":true}}')
    random = make_step(3, "hostcall", *hostcall("wasi.random_get", 4096, 2,
                                                 writes=((4096, b"\x01\x02"),), t=1.5),
                       NO_SECRETS)
    assert encode(random) == b'{"seq":3,"kind":"hostcall","request":{"call":"wasi.random_get",' \
                             b'"args":[4096,2]},"answer":{"rc":0,"writes":[[4096,"AQI="]],' \
                             b'"t":1.5}}'
    now = make_step(4, "hostcall", *hostcall("system.time_now_ms", rc=1717171717171),
                    NO_SECRETS)
    assert encode(now) == b'{"seq":4,"kind":"hostcall","request":{"call":"system.time_now_ms",' \
                          b'"args":[]},"answer":{"rc":1717171717171,"writes":[],"t":0.0}}'


def test_chat_requests_and_large_requests_are_kept_as_digests() -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "x"}]}
    step = make_step(1, "chat.completion", body, {"choices": []}, NO_SECRETS)
    assert step.request is None
    assert step.request_sha256 == hashlib.sha256(
        json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
    big, answer = hostcall("fd.many", *range(REQUEST_INLINE_MAX // 2))
    step = make_step(1, "hostcall", big, answer, NO_SECRETS)
    assert step.request is None and step.request_sha256 is not None
    assert decode(encode(step)) == step
    small, answer = hostcall("wasi.random_get", 4096, 1, writes=((4096, b"a"),))
    assert make_step(1, "hostcall", small, answer, NO_SECRETS).request == small


_NOW = b'"kind":"hostcall","request":{"call":"system.time_now_ms","args":[]},'


@pytest.mark.parametrize("line", [
    # a digest posing as an answer, and the other way round
    b'{"seq":1,"kind":"guest_tool.output","request":null,"answer":"ab"}',
    b'{"seq":1,' + _NOW + b'"answer_sha256":"ab"}',
    # a request and its digest both
    b'{"seq":1,"kind":"tool.outcome","request":null,"request_sha256":"ab","answer":1}',
    # a field nobody reads: a journal must be exact
    b'{"seq":1,' + _NOW + b'"answer":{"rc":1,"writes":[],"t":0.0},"note":"x"}',
    b'{"seq":1,' + _NOW + b'"answer":{"rc":1,"writes":[],"t":0.0,"note":"x"}}',
    # true is not an int to the journal
    b'{"seq":1,' + _NOW + b'"answer":{"rc":true,"writes":[],"t":0.0}}',
    b'{"seq":1,"kind":"hostcall","request":{"call":"x","args":[true]},'
    b'"answer":{"rc":1,"writes":[],"t":0.0}}',
    # a hostcall not of its shape: replay writes what it says into guest memory
    b'{"seq":1,' + _NOW + b'"answer":{"rc":"1","writes":[],"t":0.0}}',
    b'{"seq":1,' + _NOW + b'"answer":{"rc":1,"writes":[]}}',
    b'{"seq":1,' + _NOW + b'"answer":{"rc":1,"writes":[],"t":"0"}}',
    b'{"seq":1,' + _NOW + b'"answer":{"rc":1,"writes":{},"t":0.0}}',
    b'{"seq":1,' + _NOW + b'"answer":{"rc":1,"writes":[[-1,"AQI="]],"t":0.0}}',
    b'{"seq":1,' + _NOW + b'"answer":{"rc":1,"writes":[[1.5,"AQI="]],"t":0.0}}',
    b'{"seq":1,' + _NOW + b'"answer":{"rc":1,"writes":[[8,"AQI=",1]],"t":0.0}}',
    b'{"seq":1,' + _NOW + b'"answer":{"rc":1,"writes":[["AQI="]],"t":0.0}}',
    b'{"seq":1,' + _NOW + b'"answer":{"rc":1,"writes":[[8,"not base64!"]],"t":0.0}}',
    b'{"seq":1,' + _NOW + b'"answer":1}',
    b'{"seq":1,"kind":"hostcall","request":null,"answer":{"rc":1,"writes":[],"t":0.0}}',
    b'{"seq":1,"kind":"hostcall","request":{"call":"x"},"answer":{"rc":1,"writes":[],"t":0.0}}',
    # a kind this format no longer has
    b'{"seq":1,"kind":"system.random_i64","request":null,"answer":1}',
    b'{"seq":1,"kind":"no.such_kind","request":null,"answer":1}',
    b'{"seq":-1,"kind":"end","outcome":"exited","exit_code":0}',
    b'[1,2]', b'{"seq":1', b'\xff\xfe',
])
def test_malformed_records_are_refused(line: bytes) -> None:
    with pytest.raises(JournalCorrupt):
        decode(line)


def test_answers_of_the_wrong_type_are_refused() -> None:
    for rc in ("12", True, 1.0):
        with pytest.raises(JournalError, match="rc is an int or None"):
            hostcall_answer(rc, [], 0.0, NO_SECRETS)  # type: ignore[arg-type]
    with pytest.raises(JournalError, match="t is a finite number"):
        hostcall_answer(0, [], float("nan"), NO_SECRETS)
    with pytest.raises(JournalError, match="write is bytes, not str"):
        hostcall_answer(0, [(4096, "text")], 0.0, NO_SECRETS)  # type: ignore[list-item]
    for address in (-1, True, 4096.0):
        with pytest.raises(JournalError, match="address is a guest address"):
            hostcall_answer(0, [(address, b"x")], 0.0, NO_SECRETS)  # type: ignore[list-item]
    # An answer made by hand is held to the shape a reader requires, before it is stored.
    with pytest.raises(JournalError, match="step 1: a hostcall answer's rc") as caught:
        make_step(1, "hostcall", {"call": "system.random_i64", "args": []},
                  {"rc": "12", "writes": [], "t": 0.0}, NO_SECRETS)
    assert not isinstance(caught.value, JournalCorrupt)
    with pytest.raises(JournalError, match="a hostcall write is not base64"):
        make_step(1, "hostcall", {"call": "x", "args": []},
                  {"rc": 0, "writes": [[8, "not base64!"]], "t": 0.0}, NO_SECRETS)
    with pytest.raises(JournalError, match="hostcall request is not"):
        make_step(1, "hostcall", {"call": "x", "args": ["1"]}, HOSTCALLS["sleep_ms"][1],
                  NO_SECRETS)
    with pytest.raises(JournalError, match="unknown journal kind"):
        make_step(1, "system.random_i64", None, 1, NO_SECRETS)
    with pytest.raises(JournalError, match="not JSON"):
        encode(make_step(1, "tool.outcome", None, {"x": object()}, NO_SECRETS))


def test_a_request_is_kept_as_a_reader_decodes_it(tmp_path: Path) -> None:
    """The seam passes a call's arguments as the tuple Python gave it: stored,
    and compared on replay, as the list a reader decodes."""
    store = FileJournalStore(tmp_path)
    request = {"call": "wasi.random_get", "args": (4096, 2)}
    answer = hostcall_answer(0, [(4096, b"\x01\x02")], 0.0, NO_SECRETS)
    with JournalWriter.open(store, "run") as journal:
        journal.start(module=b"m", argv=[], env=[], stdin=b"", limits={}, flags={})
        journal.append("hostcall", request, answer)
    step = make_step(1, "hostcall", request, answer, NO_SECRETS)
    assert step.request == {"call": "wasi.random_get", "args": [4096, 2]}
    assert decode(encode(step)) == step
    assert JournalReader(store, "run").next_answer("hostcall", request) == answer


# ---- hypothesis: any record survives encode/decode ---------------------------------------

_json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False)
    | st.text(st.characters(codec="utf-8")) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12)


_hostcall_requests = st.fixed_dictionaries(
    {"call": st.text(), "args": st.lists(st.integers(), max_size=6)})
_hostcall_answers = st.builds(
    hostcall_answer, st.none() | st.integers(),
    st.lists(st.tuples(st.integers(min_value=0, max_value=(1 << 32) - 1),
                       st.binary(max_size=64)), max_size=3),
    st.floats(min_value=0, allow_infinity=False), st.just(NO_SECRETS))


@st.composite
def _records(draw: st.DrawFn) -> Any:
    which = draw(st.sampled_from(["step", "step", "step", "start", "end"]))
    if which == "start":
        return Start.of_run(module=draw(st.binary(max_size=16)),
                            argv=draw(st.lists(st.text(), max_size=3)),
                            env=draw(st.lists(st.text(min_size=1), max_size=3)),
                            stdin=draw(st.binary(max_size=32)),
                            limits=draw(st.dictionaries(st.text(), _json_values, max_size=3)),
                            flags=draw(st.dictionaries(st.text(), _json_values, max_size=3)),
                            scrubber=NO_SECRETS)
    seq = draw(st.integers(min_value=1, max_value=1 << 40))
    if which == "end":
        return End(seq, draw(st.text(max_size=64)), draw(st.integers(-255, 255)))
    kind = draw(st.sampled_from(sorted(KINDS)))
    if kind == "hostcall":
        return make_step(seq, kind, draw(_hostcall_requests), draw(_hostcall_answers),
                         NO_SECRETS)
    request = draw(_json_values | st.fixed_dictionaries({"arguments": _json_values}))
    return make_step(seq, kind, request, draw(_json_values), NO_SECRETS)


@given(_records())
def test_any_record_round_trips(record: Any) -> None:
    line = encode(record)
    assert b"\n" not in line and line.isascii()
    assert decode(line) == record
    assert encode(decode(line)) == line


# ---- secrets -----------------------------------------------------------------------------

KEY = "sk-live-Zq8vT3nB5mW2pX9r"


def _escaped(text: str) -> str:
    return "".join(f"\\u{ord(c):04x}" for c in text)


def test_secrets_never_reach_the_stored_bytes(tmp_path: Path) -> None:
    """A key planted everywhere a run's answers come from: a completion (plain and
    JSON-escaped, as servers echo keys), a tool's output, dict keys, the bytes
    hostcalls write into guest memory (a user stream's frame, a microphone's
    samples, an ASR event), argv, flags, stdin, the environment's values."""
    store = FileJournalStore(tmp_path)
    with JournalWriter.open(store, "run", secrets=[KEY]) as journal:
        journal.start(module=b"m", argv=["agent", f"--key={KEY}"],
                      env={"OPENAI_API_KEY": KEY}, stdin=f"token {KEY}\n".encode(),
                      limits={KEY: 1}, flags={"header": f"Bearer {KEY}"})
        journal.append("chat.completion", {"messages": [{"content": KEY}]}, {
            "error": {"message": f"Incorrect API key provided: {KEY}"},
            "choices": [{"message": {"content": _escaped(KEY)}}]})
        journal.append("tool.outcome", {"source": "mcp:env", "name": "printenv",
                                        "arguments": {"name": KEY}},
                       {"ok": True, "output": f"OPENAI_API_KEY={KEY}", KEY: "as a key"})
        for call, data in (("user_streams.user_stream_read", f"user pasted {KEY}".encode()),
                           ("mic.mic_read", b"\x00" + KEY.encode() + b"\xff"),
                           ("rtasr.rtasr_read", json.dumps({"text": f"the key is {KEY}"},
                                                           ensure_ascii=False).encode()),
                           ("rtasr.rtasr_read", _escaped(KEY).encode())):
            journal.append("hostcall", {"call": call, "args": [5, 4096, 256]}, hostcall_answer(
                len(data), [(4096, data)], 7.0, journal.scrubber))
        journal.end("exited", 0)
    stored = store.path_of("run").read_bytes()
    decoded = b"".join(base64.b64decode(v) for v in _base64_fields(stored))
    for blob in (stored, decoded, stored.decode("unicode_escape").encode("utf-8", "replace")):
        assert KEY.encode() not in blob
    records = list(store.records("run"))
    start = records[0]
    assert isinstance(start, Start)
    assert start.stdin is None  # withheld: its digest stays, a resume is given it again
    assert start.stdin_sha256 == hashlib.sha256(f"token {KEY}\n".encode()).hexdigest()
    assert "[redacted]" in start.argv[1]
    completion = records[1]
    assert isinstance(completion, Step)
    assert "[redacted]" in completion.answer["error"]["message"]


def _base64_fields(stored: bytes) -> list[str]:
    found = []
    for line in stored.splitlines():
        record = json.loads(line)
        if record.get("stdin_base64"):
            found.append(record["stdin_base64"])
        if record["kind"] == "hostcall":
            found += [text for _, text in record["answer"]["writes"]]
    assert found
    return found


@pytest.mark.parametrize("secret", [KEY, "sk-short", "a-longer-key-than-the-marker-" * 3])
def test_a_secret_in_a_hostcall_write_is_scrubbed_and_its_length_kept(secret: str) -> None:
    """Base64 hides a key from any scrub of the record, so the write's bytes are
    scrubbed first; replay writes them back into a buffer of the size the
    guest gave, so they keep their length whether the marker is shorter or longer."""
    scrubber = SecretScrubber([secret], min_length=4)
    data = b"\x00pasted " + secret.encode() + b" and more\xff"
    answer = hostcall_answer(len(data), [(4096, data), (0, b"nothing secret")], 0.0, scrubber)
    (address, written), kept = hostcall_writes(answer)
    assert address == 4096 and len(written) == len(data)
    assert secret.encode() not in written and written.startswith(b"\x00pasted [redac")
    assert kept == (0, b"nothing secret")
    assert secret.encode() not in encode(make_step(1, "hostcall", {"call": "c", "args": []},
                                                   answer, scrubber))


def test_a_short_secret_spelling_base64_does_not_break_a_write(tmp_path: Path) -> None:
    """A writer's secret may be as short as four characters; the base64 of a
    write is no text to scrub (its bytes were), so it is stored intact."""
    store = FileJournalStore(tmp_path)
    with JournalWriter.open(store, "run", secrets=["AAAA"]) as journal:
        journal.start(module=b"m", argv=[], env=[], stdin=b"", limits={}, flags={})
        journal.append("hostcall", {"call": "wasi.random_get", "args": [4096, 6]},
                       hostcall_answer(0, [(4096, b"\0" * 6)], 0.0, journal.scrubber))
    step = list(store.records("run"))[1]
    assert isinstance(step, Step)
    assert step.answer["writes"] == [[4096, "AAAAAAAA"]]
    assert hostcall_writes(step.answer) == [(4096, b"\0" * 6)]


@given(st.binary(max_size=40), st.binary(max_size=40))
def test_any_write_holding_a_secret_loses_it_and_keeps_its_length(
        before: bytes, after: bytes) -> None:
    data = before + KEY.encode() + after
    scrubber = SecretScrubber([KEY], min_length=4)
    [(_, written)] = hostcall_writes(hostcall_answer(0, [(0, data)], 0.0, scrubber))
    assert len(written) == len(data) and KEY.encode() not in written
    [(_, plain)] = hostcall_writes(hostcall_answer(0, [(0, before + after)], 0.0, NO_SECRETS))
    assert plain == before + after


# ---- divergence --------------------------------------------------------------------------

NOW = hostcall("system.time_now_ms", rc=1000, t=0.5)
ASK_NOW = ("hostcall", NOW[0])


def _journal(tmp_path: Path) -> FileJournalStore:
    store = FileJournalStore(tmp_path)
    with JournalWriter.open(store, "run") as journal:
        journal.start(module=b"module-a", argv=["a"], env=[], stdin=b"", limits={},
                      flags={"model": "m1"})
        journal.append("hostcall", *NOW)
        journal.append("tool.outcome", {"source": "mcp:calc", "name": "add",
                                        "arguments": {"a": 1}}, {"ok": True, "output": "1"})
        journal.append("guest_tool.output", {"name": "g", "arguments": {}}, "made by the guest")
        journal.append("chat.completion", {"messages": ["hi"]}, {"choices": []})
        journal.end("exited", 0)
    return store


def test_replay_serves_the_answers_in_order(tmp_path: Path) -> None:
    reader = JournalReader(_journal(tmp_path), "run")
    assert reader.next_answer(*ASK_NOW) == {"rc": 1000, "writes": [], "t": 0.5}
    assert reader.next_answer("tool.outcome", {"source": "mcp:calc", "name": "add",
                                               "arguments": {"a": 1}}) == {"ok": True,
                                                                           "output": "1"}
    reader.check("guest_tool.output", {"name": "g", "arguments": {}}, "made by the guest")
    assert reader.next_answer("chat.completion", {"messages": ["hi"]}) == {"choices": []}
    assert reader.exhausted and reader.end == End(5, "exited", 0)


@pytest.mark.parametrize(("asks", "message"), [
    ([("chat.completion", {"messages": ["hi"]})],
     "journal 'run' step 1 diverges: the journal has 'hostcall', "
     "the guest asked for 'chat.completion'"),
    ([("hostcall", {"call": "system.random_i64", "args": []})],
     "journal 'run' step 1 (hostcall) diverges at request.call: recorded "
     "\"system.time_now_ms\", got \"system.random_i64\""),
    ([("hostcall", {"call": "system.time_now_ms", "args": [0]})],
     "journal 'run' step 1 (hostcall) diverges at request.args: recorded 0 items, got 1"),
    ([ASK_NOW,
      ("tool.outcome", {"source": "mcp:calc", "name": "sub", "arguments": {"a": 1}})],
     "journal 'run' step 2 (tool.outcome) diverges at request.name: recorded \"add\", "
     "got \"sub\""),
    ([ASK_NOW,
      ("tool.outcome", {"source": "mcp:calc", "name": "add", "arguments": {"a": 2}})],
     "journal 'run' step 2 (tool.outcome) diverges at request.arguments_sha256: recorded"),
    ([ASK_NOW,
      ("tool.outcome", {"source": "mcp:calc", "name": "add", "arguments": {"a": 1}}),
      ("guest_tool.output", {"name": "g", "arguments": {}}),
      ("chat.completion", {"messages": ["hello"]})],
     "journal 'run' step 4 (chat.completion) diverges at request_sha256: recorded"),
    ([ASK_NOW,
      ("tool.outcome", {"source": "mcp:calc", "name": "add", "arguments": {"a": 1}}),
      ("guest_tool.output", {"name": "g", "arguments": {}}),
      ("chat.completion", {"messages": ["hi"]}), ASK_NOW],
     "journal 'run' step 5 goes beyond the journal: the guest asked for "
     "'hostcall', and the run ended there (exited, exit 0)"),
])
def test_divergence_names_the_step_and_the_first_difference(
        tmp_path: Path, asks: list[tuple[str, Any]], message: str) -> None:
    reader = JournalReader(_journal(tmp_path), "run")
    *before, (kind, request) = asks
    for earlier_kind, earlier in before:
        if earlier_kind == "guest_tool.output":
            reader.check(earlier_kind, earlier, "made by the guest")
        else:
            reader.next_answer(earlier_kind, earlier)
    with pytest.raises(ReplayDiverged) as caught:
        reader.next_answer(kind, request)
    assert str(caught.value).startswith(message)
    assert caught.value.step == len(asks)


def test_a_guest_output_that_changed_diverges(tmp_path: Path) -> None:
    reader = JournalReader(_journal(tmp_path), "run")
    reader.next_answer(*ASK_NOW)
    reader.next_answer("tool.outcome", {"source": "mcp:calc", "name": "add",
                                        "arguments": {"a": 1}})
    with pytest.raises(ReplayDiverged, match=r"step 3 \(guest_tool.output\) diverges at the "
                                             r"answer"):
        reader.check("guest_tool.output", {"name": "g", "arguments": {}}, "made otherwise")


def test_another_module_or_flag_diverges_at_step_0(tmp_path: Path) -> None:
    reader = JournalReader(_journal(tmp_path), "run")

    def start(module: bytes, model: str) -> Start:
        # limits differ on purpose: a resumed run has the budget that was left
        return Start.of_run(module=module, argv=["a"], env=[], stdin=b"", limits={"other": 1},
                            flags={"model": model}, scrubber=NO_SECRETS)

    reader.check_start(start(b"module-a", "m1"))
    with pytest.raises(ReplayDiverged, match=r"step 0 \(start\) diverges at module_sha256"):
        reader.check_start(start(b"module-b", "m1"))
    with pytest.raises(ReplayDiverged, match=r'step 0 \(start\) diverges at flags\.model: '
                                             r'recorded "m1", got "m2"'):
        reader.check_start(start(b"module-a", "m2"))


def test_a_request_holding_a_secret_still_matches_on_replay(tmp_path: Path) -> None:
    """The reader scrubs what the guest asks as the writer did: the stored
    form has no key, and the same request with the same key compares equal."""
    store = FileJournalStore(tmp_path)
    with JournalWriter.open(store, "run", secrets=[KEY]) as journal:
        journal.start(module=b"m", argv=[], env=[], stdin=b"", limits={}, flags={})
        journal.append("tool.outcome", {"source": "mcp:asr", "name": KEY, "arguments": {}},
                       {"text": "hi"})
    assert KEY.encode() not in store.path_of("run").read_bytes()
    reader = JournalReader(store, "run", secrets=[KEY])
    assert reader.next_answer("tool.outcome", {"source": "mcp:asr", "name": KEY,
                                               "arguments": {}}) == {"text": "hi"}


def test_env_var_values_are_not_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPEARPY_TEST_TOKEN", "value-that-must-not-be-stored")
    store = FileJournalStore(tmp_path)
    with JournalWriter.open(store, "run") as journal:
        journal.start(module=b"m", argv=[], env=os.environ, stdin=b"", limits={}, flags={})
    stored = store.path_of("run").read_bytes()
    assert b"SPEARPY_TEST_TOKEN" in stored
    assert b"value-that-must-not-be-stored" not in stored


# ---- the room ----------------------------------------------------------------------------

LEAVES = ("spearpy", "spearpy._json", "spearpy._jsondiff", "spearpy._term", "spearpy.errors",
          "spearpy.outcome", "spearpy.observe.scrub")


def test_the_journal_imports_only_leaves() -> None:
    """It sits low in docs/architecture.md: the run core will call it, never the reverse."""
    import ast

    room = Path(__file__).resolve().parents[1] / "spearpy" / "journal"
    offenders = []
    for path in room.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [node.module or ""] if isinstance(node, ast.ImportFrom) else \
                [a.name for a in node.names] if isinstance(node, ast.Import) else []
            offenders += [f"{path.name}: {name}" for name in names
                          if name.split(".")[0] in ("spearpy", "wasmtime", "httpx")
                          and name not in LEAVES and not name.startswith("spearpy.journal")]
    assert offenders == []
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", "import sys, spearpy.journal, "
                           "spearpy.journal.postgres, spearpy.journal.view; "
                           "print(sorted(m for m in ('wasmtime', 'httpx', 'spearpy.instance') "
                           "if m in sys.modules))"], capture_output=True, text=True, timeout=60,
                          check=True)
    assert done.stdout.strip() == "[]"


def test_what_a_damaged_journal_held_is_shown_short_and_escaped() -> None:
    from spearpy.journal.records import decode

    line = json.dumps({"seq": 1, "kind": "\x1b[2J" + "k" * 10_000, "request": None,
                       "answer": 1})
    with pytest.raises(JournalCorrupt) as caught:
        decode(line)
    message = str(caught.value)
    assert len(message) < 200 and "\x1b" not in message
