"""`spearpy show JOURNAL.jsonl`: the steps listed, what came from outside escaped."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from spearpy.journal import FileJournalStore, JournalWriter


def _show(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "spearpy", "show", *args], capture_output=True,
                          text=True, timeout=120, check=False)


def test_show_lists_the_steps_with_control_characters_escaped(tmp_path: Path) -> None:
    store = FileJournalStore(tmp_path)
    with JournalWriter.open(store, "run") as journal:
        journal.start(module=b"m", argv=["agent"], env=[], stdin=b"abc", limits={},
                      flags={"model": "m"})
        journal.append("system.time_now_ms", None, 1234)
        journal.append("chat.completion", {"messages": []}, {"choices": [{"message": {
            "content": "\u202e\x1b]52;c;cGF5\x07\x1b[31m"}}]})
        journal.append("mic.frame", {"fd": 4}, b"\x00" * 320)
        journal.end("exited", 0)
    path = store.path_of("run")
    done = _show(str(path))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert [line.split()[:2] for line in lines] == [
        ["0", "start"], ["1", "system.time_now_ms"], ["2", "chat.completion"],
        ["3", "mic.frame"], ["4", "end"]]
    assert "stdin 3 bytes" in lines[0] and "1234" in lines[1]
    assert "\x1b" not in done.stdout and "\x07" not in done.stdout
    assert "\u202e" not in done.stdout and "\\u202e" in lines[2]
    assert "320 bytes" in lines[3] and "exited, exit code 0" in lines[4]
    as_json = _show("--json", str(path))
    assert as_json.stdout == path.read_text()


def test_show_reports_a_damaged_journal(tmp_path: Path) -> None:
    store = FileJournalStore(tmp_path)
    with JournalWriter.open(store, "run") as journal:
        journal.start(module=b"m", argv=[], env=[], stdin=b"", limits={}, flags={})
        journal.append("system.time_now_ms", None, 1)
    path = store.path_of("run")
    path.write_bytes(path.read_bytes().replace(b'"answer":1', b'"answer":"1"'))
    done = _show(str(path))
    assert done.returncode == 2
    assert "journal 'run' line 2: 'answer' is not int" in done.stderr
