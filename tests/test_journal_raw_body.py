"""A completion's record keeps the body as the upstream sent it when it can
stand in a journal line as it is (ASCII, one line, no secret), and encodes
it again when it cannot; either way a replay reads back what the run got.
Real parts: the OpenAI backend over loopback HTTP against a raw socket
server, and a journal writer on a real file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from spearpy.journal import FileJournalStore
from spearpy.journal.records import decode
from spearpy.journal.writer import JournalWriter
from tests.test_backends_wire_h1 import RawServer, answer, complete_once

KEY = "sk-raw-body-0123456789abcdef"
SPACED = ('{ "id": "r", "object": "chat.completion", "model": "m", "choices": [ {"index": 0, '
          '"message": {"role": "assistant", "content": "hello"}, "finish_reason": "stop"} ] }')


def _record(server: RawServer, tmp_path: Path) -> tuple[bytes, dict[str, object]]:
    """One completion asked and journaled as a run journals it; the line
    written and the body the run got."""
    result = complete_once(server)
    assert result.error is None and result.body is not None
    store = FileJournalStore(tmp_path)
    with JournalWriter.open(store, "raw", secrets=[KEY]) as writer:
        writer.start(module=b"\0asm", argv=[], env=[], stdin=b"", limits={}, flags={})
        writer.append_completion("ab" * 32, {
            "backend": result.backend, "model": result.model, "body": result.body,
            "error": None, "latency_ms": 1.0, "t": 2.0}, result.raw)
    line = (tmp_path / "raw.jsonl").read_bytes().splitlines()[1]
    return line, result.body


@pytest.mark.parametrize("body, spliced", [
    (SPACED, True),
    (SPACED.replace("hello", "h\u00e9llo"), False),  # UTF-8: encoded again, ASCII
    (SPACED.replace(", ", ",\n  "), False),  # more than one line
    (SPACED.replace("hello", KEY), False),  # a secret: scrubbed by the general path
])
def test_the_upstreams_body_is_kept_when_a_line_can_hold_it(tmp_path: Path, body: str,
                                                              spliced: bool) -> None:
    raw = body.encode("utf-8")
    server = RawServer(lambda c, r: (answer(raw), False))
    try:
        line, got = _record(server, tmp_path)
    finally:
        server.close()
    assert line.isascii() and b"\n" not in line
    assert (f'"body":{body}'.encode() in line) is spliced
    stored = decode(line).answer
    assert KEY not in line.decode("ascii")
    if KEY in body:
        assert "[redacted]" in json.dumps(stored)
    else:
        assert stored["body"] == got == json.loads(body)
