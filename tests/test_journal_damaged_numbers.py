"""A journal line whose number is longer than Python converts (4300 digits)
is a damaged record (JournalCorrupt: a replay stops there), not a
ValueError out of the reader. Real parts: a journal file on disk."""

from __future__ import annotations

from pathlib import Path

import pytest

from spearpy.journal import FileJournalStore, JournalCorrupt
from spearpy.journal.records import decode
from spearpy.journal.writer import JournalWriter


def test_a_number_too_long_to_convert_is_a_damaged_record(tmp_path: Path) -> None:
    store = FileJournalStore(tmp_path)
    with JournalWriter.open(store, "run") as writer:
        writer.start(module=b"m", argv=[], env=[], stdin=b"", limits={}, flags={})
        writer.append_hostcall("system.random_i64", (), 7, [], 0.0)
    path = tmp_path / "run.jsonl"
    lines = path.read_bytes().splitlines()
    lines[1] = lines[1].replace(b'"rc":7', b'"rc":' + b"7" * 5000)
    path.write_bytes(b"\n".join(lines) + b"\n")
    with pytest.raises(JournalCorrupt, match="not JSON"):
        decode(lines[1])
    with pytest.raises(JournalCorrupt):
        list(store.records("run"))
