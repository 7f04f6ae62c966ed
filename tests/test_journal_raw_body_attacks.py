"""A hostile upstream against the completion record's raw splice
(journal/lines.py): bodies whose bytes are ASCII but whose JSON is not the
text of those bytes. json.loads(bytes) decodes UTF-16 and UTF-32 (it guesses
from the NULs of the first four bytes), so an upstream can send a body of
ASCII bytes that reads as JSON live but is not JSON as a journal line, and
spells the run's key with NULs between its characters. Real parts: the
OpenAI backend over loopback HTTP against a raw socket server, a journal
writer on a real file."""

from __future__ import annotations

from pathlib import Path

import pytest

from spearpy.backends.base import CompletionRequest
from spearpy.backends.openai import OpenAIBackend
from spearpy.journal import FileJournalStore
from spearpy.journal.records import decode
from spearpy.journal.writer import JournalWriter
from spearpy.retry import RetryPolicy
from tests.test_backends_wire_h1 import RawServer, answer

KEY = "sk-raw-attack-0123456789abcdef"
BODY = ('{"id":"r","object":"chat.completion","model":"m","choices":[{"index":0,'
        '"message":{"role":"assistant","content":"CONTENT"},"finish_reason":"stop"}]}')


def _complete(raw: bytes, key: str | None, monkeypatch: pytest.MonkeyPatch
              ) -> tuple[dict[str, object], bytes | None]:
    """What a run gets when a server answers `raw` (`key` its API key)."""
    if key:
        monkeypatch.setenv("RAW_ATTACK_KEY", key)
    server = RawServer(lambda c, r: (answer(raw), False))
    backend = OpenAIBackend(base_url=server.url, api_key_env="RAW_ATTACK_KEY" if key else "",
                            request_timeout=5.0, retry=RetryPolicy(max_retries=0))
    try:
        result = backend.complete(CompletionRequest(
            model="m", messages=[{"role": "user", "content": "hi"}]))
    finally:
        backend.close()
        server.close()
    assert result.error is None and result.body is not None, result.error
    return result.body, result.raw


def _journal(tmp_path: Path, body: dict[str, object], raw: bytes | None) -> bytes:
    store = FileJournalStore(tmp_path)
    with JournalWriter.open(store, "atk", secrets=[KEY]) as writer:
        writer.start(module=b"\0asm", argv=[], env=[], stdin=b"", limits={}, flags={})
        writer.append_completion("ab" * 32, {
            "backend": "openai", "model": "m", "body": body, "error": None,
            "latency_ms": 1.0, "t": 2.0}, raw)
    return (tmp_path / "atk.jsonl").read_bytes().splitlines()[1]


@pytest.mark.parametrize("encoding", ["utf-16-le", "utf-16-be", "utf-32-le", "utf-32-be"])
def test_a_wide_body_of_ascii_bytes_is_replayed_as_the_run_got_it(
        tmp_path: Path, encoding: str, monkeypatch: pytest.MonkeyPatch) -> None:
    raw = BODY.replace("CONTENT", "hello").encode(encoding)
    assert raw.isascii()  # every byte ASCII: the splice's first check lets it through
    body, got_raw = _complete(raw, None, monkeypatch)
    line = _journal(tmp_path, body, got_raw)
    assert b"\0" not in line
    assert decode(line).answer["body"] == body


@pytest.mark.parametrize("encoding", ["utf-16-le", "utf-32-be"])
def test_a_key_spelled_wide_reaches_neither_the_guest_nor_the_journal(
        tmp_path: Path, encoding: str, monkeypatch: pytest.MonkeyPatch) -> None:
    raw = BODY.replace("CONTENT", f"your key is {KEY}").encode(encoding)
    body, got_raw = _complete(raw, KEY, monkeypatch)
    assert KEY not in repr(body)  # what the guest is given
    line = _journal(tmp_path, body, got_raw)
    for spelling in ("ascii", encoding):
        assert KEY.encode(spelling) not in line
    assert KEY not in repr(decode(line).answer)


def test_a_wide_key_in_the_raw_body_is_not_spliced_into_a_line(tmp_path: Path) -> None:
    """The journal's own check, whatever the backend did: the body it is
    given is scrubbed, the raw bytes spell the key with NULs."""
    raw = BODY.replace("CONTENT", KEY).encode("utf-16-le")
    body = {"content": "[redacted]"}
    line = _journal(tmp_path, body, raw)
    assert KEY.encode("utf-16-le") not in line and b"\0" not in line
    assert decode(line).answer["body"] == body


@pytest.mark.parametrize("spliced", [True, False])
def test_a_body_nested_as_deep_as_a_run_takes_is_read_back(
        tmp_path: Path, spliced: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """A record wraps its answer's body two levels deeper (the record, the
    answer): a body at the depth a live run accepts must still read back."""
    depth = 63  # the body's own object, then 63 arrays: 64 levels
    text = BODY.replace("CONTENT", "deep")[:-1] + ',"x":' + "[" * depth + "]" * depth + "}"
    # Spliced as sent, or (non-ASCII) encoded again by the general path.
    raw = text.encode("ascii") if spliced else text.replace("deep", "d\u00e9ep").encode()
    body, got_raw = _complete(raw, None, monkeypatch)
    line = _journal(tmp_path, body, got_raw)
    assert decode(line).answer["body"] == body
