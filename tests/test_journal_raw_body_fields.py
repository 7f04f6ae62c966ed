"""The completion record's raw splice (journal/lines.py) scrubs the fields
beside the body too: the model name a run got back (the request's own, when
the upstream names none) is text a secret could spell."""

from __future__ import annotations

import json

from spearpy.journal.lines import EncodedScrub, completion_line
from spearpy.journal.records import decode
from spearpy.journal.writer import MIN_SECRET_LENGTH
from spearpy.observe.scrub import SecretScrubber

KEY = "sk-raw-fields-0123456789abcdef"


def test_a_secret_in_the_model_beside_a_clean_raw_body_is_not_stored() -> None:
    scrubber = SecretScrubber([KEY], min_length=MIN_SECRET_LENGTH)
    body = {"id": "r", "choices": [{"message": {"role": "assistant", "content": "hi"}}]}
    answer = {"backend": "openai", "model": KEY, "body": body, "error": None,
              "latency_ms": 1.0, "t": 2.0}
    line = completion_line(3, "ab" * 32, answer, EncodedScrub(scrubber), scrubber,
                           json.dumps(body).encode("ascii"))
    assert KEY not in line.decode("ascii")
    step = decode(line)
    assert step.answer["body"] == body  # type: ignore[union-attr]
