"""The journal's fast paths give what its general path gives, byte for byte.

The completion and guest-tool records (journal/lines.py), the completion's
incremental request digest (durable/digests.py) and the scrub decided from
encoded text (EncodedScrub) are each compared with records.make_step /
stored_request / SecretScrubber.value on the same values, secrets in them
or not, spelled plainly, escaped, nested, or not at all.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spearpy.durable.digests import RequestDigests
from spearpy.journal.hostcall_answers import hostcall_answer, stored_writes
from spearpy.journal.lines import EncodedScrub, completion_line, guest_output_line, hostcall_line
from spearpy.journal.records import (
    Digested,
    decode,
    encode,
    kind_of,
    line_text,
    make_step,
    stored_request,
)
from spearpy.journal.writer import MIN_SECRET_LENGTH
from spearpy.observe.scrub import SecretScrubber

KEY = "sk-lines-0123456789abcdef"
SCRUBBERS = {
    "none": SecretScrubber([], min_length=MIN_SECRET_LENGTH),
    "key": SecretScrubber([KEY], min_length=MIN_SECRET_LENGTH),
    # Not plain (a slash, a quote): EncodedScrub never trusts the text.
    "odd": SecretScrubber(['se/cr"et-9'], min_length=MIN_SECRET_LENGTH),
}


def _escaped(text: str) -> str:
    """`text` with its first character as a JSON \\u escape."""
    return f"\\u{ord(text[0]):04x}{text[1:]}"


# Strings a model or a tool could send: the key plainly, escaped once or
# twice (JSON in JSON), inside other text, non-ASCII, or none of it.
STRINGS = st.one_of(
    st.text(max_size=20),
    st.sampled_from([KEY, f"the key is {KEY}.", _escaped(KEY), "\\" + _escaped(KEY),
                     json.dumps({"k": KEY}), "caf\u00e9 \u2603", 'a "quoted" \\ text',
                     'se/cr"et-9', "se\\/cr\\\"et-9"]))
VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-10**6, 10**6) | STRINGS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(STRINGS, inner, max_size=4),
    max_leaves=12)


@settings(max_examples=300, deadline=None)
@given(value=VALUES, which=st.sampled_from(sorted(SCRUBBERS)))
def test_a_clean_text_is_the_text_of_a_value_scrubbing_leaves_alone(value: Any,
                                                                     which: str) -> None:
    scrubber = SCRUBBERS[which]
    if EncodedScrub(scrubber).clean(line_text(value)):
        assert scrubber.value(value) == value


def _completion_answer(content: Any) -> dict[str, Any]:
    return {"backend": "openai", "model": "m", "body": {
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content}}],
        "usage": {"prompt_tokens": 3}}, "error": None, "latency_ms": 1.5, "t": 2.25}


@settings(max_examples=150, deadline=None)
@given(content=VALUES, which=st.sampled_from(sorted(SCRUBBERS)), seq=st.integers(1, 10**6))
def test_a_completion_line_is_the_general_paths_line(content: Any, which: str,
                                                     seq: int) -> None:
    scrubber = SCRUBBERS[which]
    answer = _completion_answer(content)
    digest = "ab" * 32
    general = encode(make_step(seq, "chat.completion", Digested(digest), answer, scrubber))
    assert completion_line(seq, digest, answer, EncodedScrub(scrubber), scrubber) == general
    assert decode(general).answer == scrubber.value(answer)


@settings(max_examples=150, deadline=None)
@given(name=STRINGS, arguments=STRINGS, ok=st.booleans(), output=STRINGS,
       code=st.none() | STRINGS, which=st.sampled_from(sorted(SCRUBBERS)))
def test_a_guest_output_line_is_the_general_paths_line(name: str, arguments: str, ok: bool,
                                                       output: str, code: str | None,
                                                       which: str) -> None:
    scrubber = SCRUBBERS[which]
    general = encode(make_step(7, "guest_tool.output", {"name": name, "arguments": arguments},
                               [ok, output, code], scrubber))
    fast = guest_output_line(7, name, arguments, ok, output, code, scrubber)
    assert fast == general


def test_a_guest_output_of_another_type_takes_the_general_path() -> None:
    scrubber = SCRUBBERS["none"]
    assert guest_output_line(1, "t", "{}", 1, "out", None, scrubber) is None  # type: ignore[arg-type]
    assert guest_output_line(1, "t" * 5000, "{}", True, "out", None, scrubber) is None


@settings(max_examples=200, deadline=None)
@given(call=st.sampled_from(["host.clock", "system.time_now_ms", "wasi.random_get",
                             "user_stream.read", "Odd Name", "", "x" * 70]),
       args=st.lists(st.integers(-2**63, 2**64), max_size=6),
       rc=st.none() | st.integers(-2**63, 2**64),
       writes=st.lists(st.tuples(st.integers(0, 2**32 - 1), st.binary(max_size=40) | STRINGS.map(
           lambda text: text.encode("utf-8", "surrogatepass"))), max_size=3),
       t=st.floats(0, 1e12, allow_nan=False) | st.integers(0, 10**9).map(float),
       which=st.sampled_from([*sorted(SCRUBBERS), "name"]))
def test_a_hostcall_line_is_the_general_paths_line(
        call: str, args: list[int], rc: int | None, writes: list[tuple[int, bytes]], t: float,
        which: str) -> None:
    # "name": a secret that spells part of a hostcall's name, which the
    # general path redacts there: the fast line must leave that to it.
    scrubber = SCRUBBERS[which] if which in SCRUBBERS else \
        SecretScrubber(["time"], min_length=MIN_SECRET_LENGTH)
    general = encode(make_step(3, "hostcall", {"call": call, "args": args},
                               hostcall_answer(rc, writes, t, scrubber), scrubber))
    fast = hostcall_line(3, call, tuple(args), rc, stored_writes(writes, scrubber), t, scrubber)
    usual = call in ("host.clock", "wasi.random_get", "user_stream.read") or (
        call == "system.time_now_ms" and which != "name")
    assert fast == (general if usual else None)


# ---- the completion's request digest ------------------------------------------------


@dataclass
class _Request:
    """What RequestDigests reads of a CompletionRequest."""

    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None
    params: dict[str, Any]
    stream: bool


def _whole(request: _Request, scrubber: SecretScrubber) -> str:
    """docs/durable.md's request_sha256: the whole request, scrubbed, canonical."""
    digest = stored_request(kind_of("chat.completion"), {
        "messages": request.messages, "tools": request.tools, "params": request.params,
        "stream": request.stream}, scrubber)[1]
    assert digest is not None
    return digest


MESSAGES = st.lists(st.fixed_dictionaries({"role": st.sampled_from(["user", "assistant"]),
                                           "content": STRINGS}), max_size=5)


@settings(max_examples=100, deadline=None)
@given(batches=st.lists(MESSAGES, min_size=1, max_size=4),
       tools=st.none() | st.just([{"type": "function", "function": {"name": "sum"}}]),
       params=st.sampled_from([{}, {"temperature": 0.5}, {"stop": [KEY]}]),
       stream=st.booleans(), which=st.sampled_from(sorted(SCRUBBERS)))
def test_the_incremental_digest_is_the_whole_requests(batches: list[list[dict[str, Any]]],
                                                      tools: Any, params: dict[str, Any],
                                                      stream: bool, which: str) -> None:
    """The conversation grows between completions; each digest is that of
    the whole request, as journals have always stored it."""
    scrubber = SCRUBBERS[which]
    digests = RequestDigests()
    request = _Request([], tools, params, stream)
    for batch in batches:
        request.messages.extend(batch)
        assert digests.of(request, scrubber) == _whole(request, scrubber)  # type: ignore[arg-type]


def test_a_key_the_model_echoed_digests_as_its_replay_does() -> None:
    """Live, the conversation holds the key the model echoed; replayed, the
    journal served `[redacted]` in its place. Their requests compare equal,
    so a replay of such a run goes on (it diverged at the next completion)."""
    scrubber = SCRUBBERS["key"]
    live = _Request([{"role": "user", "content": "hi"},
                     {"role": "assistant", "content": f"the key is {KEY}"},
                     {"role": "user", "content": "and?"}], None, {}, False)
    replayed = _Request([{"role": "user", "content": "hi"},
                         {"role": "assistant", "content": "the key is [redacted]"},
                         {"role": "user", "content": "and?"}], None, {}, False)
    assert RequestDigests().of(live, scrubber) == \
        RequestDigests().of(replayed, scrubber)  # type: ignore[arg-type]


def test_a_secret_spelling_a_request_key_is_digested_whole() -> None:
    scrubber = SecretScrubber(["tools"], min_length=MIN_SECRET_LENGTH)
    request = _Request([{"role": "user", "content": "use the tools"}], [{"x": 1}], {}, False)
    assert RequestDigests().of(request, scrubber) == \
        _whole(request, scrubber)  # type: ignore[arg-type]


@pytest.mark.parametrize("which", sorted(SCRUBBERS))
def test_a_new_list_or_a_shorter_one_starts_the_digest_again(which: str) -> None:
    scrubber = SCRUBBERS[which]
    digests = RequestDigests()
    first = _Request([{"role": "user", "content": "a"}, {"role": "user", "content": "b"}],
                     None, {}, False)
    digests.of(first, scrubber)  # type: ignore[arg-type]
    del first.messages[1:]
    assert digests.of(first, scrubber) == _whole(first, scrubber)  # type: ignore[arg-type]
    other = _Request([{"role": "user", "content": "c"}], None, {}, False)
    assert digests.of(other, scrubber) == _whole(other, scrubber)  # type: ignore[arg-type]


@settings(max_examples=60, deadline=None)
@given(asks=st.lists(st.tuples(st.sampled_from([{}, {"temperature": 0.5}, {"stop": [KEY]}]),
                               st.booleans(), st.booleans()), min_size=2, max_size=5))
def test_a_digest_follows_params_stream_and_tools_that_change_between_completions(
        asks: list[tuple[dict[str, Any], bool, bool]]) -> None:
    """The part after the messages is kept between completions of a send;
    another params dict, stream flag or tools list is digested anew."""
    scrubber = SCRUBBERS["key"]
    digests = RequestDigests()
    request = _Request([{"role": "user", "content": "hi"}], None, {}, False)
    for params, stream, with_tools in asks:
        request.params, request.stream = dict(params), stream
        request.tools = [{"type": "function", "function": {"name": "sum"}}] if with_tools \
            else None
        assert digests.of(request, scrubber) == _whole(request, scrubber)  # type: ignore[arg-type]
        request.messages.append({"role": "assistant", "content": "ok"})


@settings(max_examples=150, deadline=None)
@given(content=VALUES, which=st.sampled_from(sorted(SCRUBBERS)),
       spelling=st.sampled_from(["compact", "spaced", "indented", "utf-8", "escaped"]))
def test_a_completion_line_with_the_upstreams_bytes_decodes_as_the_general_paths(
        content: Any, which: str, spelling: str) -> None:
    """The body an HTTP backend received is spliced in as it came when it
    can stand in a line (ASCII, one line, no secret); else encoded again.
    Either way the record reads back as the general path's."""
    scrubber = SCRUBBERS[which]
    answer = _completion_answer(content)
    body = answer["body"]
    raw = {"compact": json.dumps(body, separators=(",", ":")),
           "spaced": json.dumps(body),
           "indented": json.dumps(body, indent=1),
           "utf-8": json.dumps(body, ensure_ascii=False),
           "escaped": json.dumps(body).replace('"assistant"', '"\\u0061ssistant"')}[spelling]
    line = completion_line(9, "cd" * 32, answer, EncodedScrub(scrubber), scrubber,
                           raw.encode("utf-8", "surrogatepass"))
    general = encode(make_step(9, "chat.completion", Digested("cd" * 32), answer, scrubber))
    assert b"\n" not in line and line.isascii()
    assert decode(line) == decode(general)
    if which == "key":
        assert KEY not in line.decode("ascii")
