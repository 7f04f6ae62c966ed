"""Secrets in dict keys are scrubbed at the transcript sink too (the
redactor's own tests check keys on the value alone): a guest that names a
param, or a key inside a param's value, after the API key leaves no copy of
it in the transcript file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from spearpy.observe.redact import REDACTED, Redactor
from spearpy.observe.transcripts import TranscriptWriter
from tests.test_observe_events import agent_wasm

SECRET = "sk-dict-key-secret-0123456789abcdef"


def test_a_secret_as_a_key_never_reaches_a_transcript(make_host: Any, scripted: Any,
                                                      tmp_path: Path) -> None:
    writer = TranscriptWriter(tmp_path, max_tool_bytes=1 << 16,
                              redactor=Redactor([SECRET], patterns=False))
    server = scripted({"default": {"content": "done"}})
    params = {SECRET: 0.5, "metadata": {f"x-{SECRET}": "v"}, "temperature": 0.5}
    result = make_host(base_url=server.base_url).run(agent_wasm([("user", "go")], [], params),
                                                     on_event=writer)
    assert result.ok and len(writer.written) == 1
    text = writer.written[0].read_text()
    assert SECRET not in text
    assert json.loads(text)["params"] == {REDACTED: 0.5, "metadata": {f"x-{REDACTED}": "v"},
                                          "temperature": 0.5}
