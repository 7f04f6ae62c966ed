"""The journal's record format: every kind round-trips, the stored forms
cannot pose as one another, secrets never reach the bytes, and a replay that
asks differently is stopped at the step, naming the first difference."""

from __future__ import annotations

import base64
import hashlib
import json
import os
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
from spearpy.journal.records import REQUEST_INLINE_MAX, Codec, make_step
from spearpy.observe.scrub import SecretScrubber

NO_SECRETS = SecretScrubber()

# A representative (request, answer) per kind, as the seam will pass them.
SAMPLES: dict[str, tuple[Any, Any]] = {
    "system.time_now_ms": (None, 1_717_171_717_171),
    "system.wall_time_s": (None, 1717171717.25),
    "system.random_i64": (None, -(1 << 63)),
    "wasi.clock_time_get": ({"clock_id": 1, "precision": 1000}, 123_456_789_000),
    "wasi.random_get": ({"len": 6}, b"\x00\xff\n{\"x"),
    "chat.completion": ({"model": "m", "messages": [{"role": "user", "content": "hi"}]},
                        {"choices": [{"message": {"role": "assistant", "content": "héllo\n"}}],
                         "usage": {"total_tokens": 3}}),
    "tool.outcome": ({"source": "mcp:calc", "name": "add", "arguments": {"a": 1, "b": 2}},
                     {"ok": True, "output": "3"}),
    "guest_tool.output": ({"name": "lookup", "arguments": {"q": "x"}}, "the guest's output"),
    "fd.epoll_ready": ({"epfd": 7, "timeout_ms": 100}, [[5, 1], [9, 4]]),
    "stream.frame": ({"fd": 11}, b"\x01\x02frame"),
    "mic.frame": ({"fd": 12, "bytes": 4}, b"\x00\x01\x00\x02"),
    "rtasr.event": ({"fd": 13}, {"type": "transcript.delta", "text": "hel"}),
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
        assert step.answer == answer  # stored as given, bytes as bytes


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
    random = make_step(3, "wasi.random_get", {"len": 2}, b"\x01\x02", NO_SECRETS)
    assert encode(random) == b'{"seq":3,"kind":"wasi.random_get","request":{"len":2},' \
                             b'"answer_base64":"AQI="}'


def test_chat_requests_and_large_requests_are_kept_as_digests() -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "x"}]}
    step = make_step(1, "chat.completion", body, {"choices": []}, NO_SECRETS)
    assert step.request is None
    assert step.request_sha256 == hashlib.sha256(
        json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
    big = {"len": 1, "pad": "x" * REQUEST_INLINE_MAX}
    assert make_step(1, "wasi.random_get", big, b"a", NO_SECRETS).request_sha256 is not None
    assert make_step(1, "wasi.random_get", {"len": 1}, b"a", NO_SECRETS).request == {"len": 1}


@pytest.mark.parametrize("line", [
    # bytes posing as JSON text, and the other way round
    b'{"seq":1,"kind":"wasi.random_get","request":null,"answer":"AQI="}',
    b'{"seq":1,"kind":"rtasr.event","request":null,"answer_base64":"AQI="}',
    # a request and its digest both
    b'{"seq":1,"kind":"rtasr.event","request":null,"request_sha256":"ab","answer":1}',
    # a field nobody reads: a journal must be exact
    b'{"seq":1,"kind":"system.random_i64","request":null,"answer":1,"note":"x"}',
    # true is not an int to the journal
    b'{"seq":1,"kind":"system.random_i64","request":null,"answer":true}',
    b'{"seq":1,"kind":"no.such_kind","request":null,"answer":1}',
    b'{"seq":-1,"kind":"end","outcome":"exited","exit_code":0}',
    b'{"seq":1,"kind":"wasi.random_get","request":null,"answer_base64":"not base64!"}',
    b'[1,2]', b'{"seq":1', b'\xff\xfe',
])
def test_malformed_records_are_refused(line: bytes) -> None:
    with pytest.raises(JournalCorrupt):
        decode(line)


def test_answers_of_the_wrong_type_are_refused() -> None:
    with pytest.raises(JournalError, match=r"system\.time_now_ms answer is int"):
        make_step(1, "system.time_now_ms", None, "12", NO_SECRETS)
    with pytest.raises(JournalError, match="unknown journal kind"):
        make_step(1, "system.nope", None, 1, NO_SECRETS)
    with pytest.raises(JournalError, match="not JSON"):
        encode(make_step(1, "rtasr.event", None, {"x": object()}, NO_SECRETS))


# ---- hypothesis: any record survives encode/decode ---------------------------------------

_json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False)
    | st.text(st.characters(codec="utf-8")) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12)


def _answer_for(codec: Codec) -> st.SearchStrategy[Any]:
    return {Codec.JSON: _json_values, Codec.INT: st.integers(),
            Codec.FLOAT: st.floats(allow_nan=False), Codec.BYTES: st.binary(max_size=64),
            Codec.DIGEST: _json_values}[codec]


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
    request = draw(_json_values | st.fixed_dictionaries({"arguments": _json_values}))
    return make_step(seq, kind, request, draw(_answer_for(KINDS[kind].answer)), NO_SECRETS)


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
    JSON-escaped, as servers echo keys), a tool's output, dict keys, bytes
    frames, argv, flags, stdin, the environment's values."""
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
        journal.append("stream.frame", {"fd": 3}, f"user pasted {KEY}".encode())
        journal.append("mic.frame", {"fd": 4}, b"\x00" + KEY.encode() + b"\xff")
        journal.append("rtasr.event", {"fd": 5}, {"text": f"the key is {KEY}"})
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
        found += [record[k] for k in ("answer_base64", "stdin_base64") if record.get(k)]
    return found


# ---- divergence --------------------------------------------------------------------------

def _journal(tmp_path: Path) -> FileJournalStore:
    store = FileJournalStore(tmp_path)
    with JournalWriter.open(store, "run") as journal:
        journal.start(module=b"module-a", argv=["a"], env=[], stdin=b"", limits={},
                      flags={"model": "m1"})
        journal.append("system.time_now_ms", None, 1000)
        journal.append("tool.outcome", {"source": "mcp:calc", "name": "add",
                                        "arguments": {"a": 1}}, {"ok": True, "output": "1"})
        journal.append("guest_tool.output", {"name": "g", "arguments": {}}, "made by the guest")
        journal.append("chat.completion", {"messages": ["hi"]}, {"choices": []})
        journal.end("exited", 0)
    return store


def test_replay_serves_the_answers_in_order(tmp_path: Path) -> None:
    reader = JournalReader(_journal(tmp_path), "run")
    assert reader.next_answer("system.time_now_ms", None) == 1000
    assert reader.next_answer("tool.outcome", {"source": "mcp:calc", "name": "add",
                                               "arguments": {"a": 1}}) == {"ok": True,
                                                                           "output": "1"}
    reader.check("guest_tool.output", {"name": "g", "arguments": {}}, "made by the guest")
    assert reader.next_answer("chat.completion", {"messages": ["hi"]}) == {"choices": []}
    assert reader.exhausted and reader.end == End(5, "exited", 0)


@pytest.mark.parametrize(("asks", "message"), [
    ([("system.random_i64", None)],
     "journal 'run' step 1 diverges: the journal has 'system.time_now_ms', "
     "the guest asked for 'system.random_i64'"),
    ([("system.time_now_ms", None),
      ("tool.outcome", {"source": "mcp:calc", "name": "sub", "arguments": {"a": 1}})],
     "journal 'run' step 2 (tool.outcome) diverges at request.name: recorded \"add\", "
     "got \"sub\""),
    ([("system.time_now_ms", None),
      ("tool.outcome", {"source": "mcp:calc", "name": "add", "arguments": {"a": 2}})],
     "journal 'run' step 2 (tool.outcome) diverges at request.arguments_sha256: recorded"),
    ([("system.time_now_ms", None),
      ("tool.outcome", {"source": "mcp:calc", "name": "add", "arguments": {"a": 1}}),
      ("guest_tool.output", {"name": "g", "arguments": {}}),
      ("chat.completion", {"messages": ["hello"]})],
     "journal 'run' step 4 (chat.completion) diverges at request_sha256: recorded"),
    ([("system.time_now_ms", None),
      ("tool.outcome", {"source": "mcp:calc", "name": "add", "arguments": {"a": 1}}),
      ("guest_tool.output", {"name": "g", "arguments": {}}),
      ("chat.completion", {"messages": ["hi"]}), ("system.time_now_ms", None)],
     "journal 'run' step 5 goes beyond the journal: the guest asked for "
     "'system.time_now_ms', and the run ended there (exited, exit 0)"),
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
    reader.next_answer("system.time_now_ms", None)
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
        journal.append("rtasr.event", {"auth": KEY}, {"text": "hi"})
    assert KEY.encode() not in store.path_of("run").read_bytes()
    reader = JournalReader(store, "run", secrets=[KEY])
    assert reader.next_answer("rtasr.event", {"auth": KEY}) == {"text": "hi"}


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
