"""`spearpy show JOURNAL.jsonl`: the steps listed, what came from outside escaped."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from spearpy.journal import FileJournalStore, JournalWriter
from spearpy.journal.records import hostcall_answer


def _show(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "spearpy", "show", *args], capture_output=True,
                          text=True, timeout=120, check=False)


def test_show_lists_the_steps_with_control_characters_escaped(tmp_path: Path) -> None:
    store = FileJournalStore(tmp_path)
    with JournalWriter.open(store, "run") as journal:
        journal.start(module=b"m", argv=["agent"], env=[], stdin=b"abc", limits={},
                      flags={"model": "m"})
        journal.append("hostcall", {"call": "system.time_now_ms", "args": []},
                       hostcall_answer(1234, [], 0.5, journal.scrubber))
        journal.append("chat.completion", {"messages": []}, {"choices": [{"message": {
            "content": "\u202e\x1b]52;c;cGF5\x07\x1b[31m"}}]})
        # bytes a guest was given are shown by size: they may be anything
        journal.append("hostcall", {"call": "mic.mic_read", "args": [4, 4096, 320]},
                       hostcall_answer(320, [(4096, b"\x1b[2J" * 80)], 12.5, journal.scrubber))
        journal.end("exited", 0)
    path = store.path_of("run")
    done = _show(str(path))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert [line.split()[:2] for line in lines] == [
        ["0", "start"], ["1", "hostcall"], ["2", "chat.completion"],
        ["3", "hostcall"], ["4", "end"]]
    assert "stdin 3 bytes" in lines[0]
    assert "system.time_now_ms() -> rc 1234, t 0.5 ms" in lines[1]
    assert "\x1b" not in done.stdout and "\x07" not in done.stdout
    assert "\u202e" not in done.stdout and "\\u202e" in lines[2]
    assert "mic.mic_read(4, 4096, 320) -> rc 320, 320 bytes at 4096, t 12.5 ms" in lines[3]
    assert "exited, exit code 0" in lines[4]
    as_json = _show("--json", str(path))
    assert as_json.stdout == path.read_text()


def test_show_reports_a_damaged_journal(tmp_path: Path) -> None:
    store = FileJournalStore(tmp_path)
    with JournalWriter.open(store, "run") as journal:
        journal.start(module=b"m", argv=[], env=[], stdin=b"", limits={}, flags={})
        journal.append("hostcall", {"call": "system.time_now_ms", "args": []},
                       hostcall_answer(1, [], 0.0, journal.scrubber))
    path = store.path_of("run")
    path.write_bytes(path.read_bytes().replace(b'"rc":1', b'"rc":"1"'))
    done = _show(str(path))
    assert done.returncode == 2
    assert "journal 'run' line 2: a hostcall answer's rc is not an int or null" in done.stderr


def test_a_summary_is_redacted_before_it_is_cut() -> None:
    """A secret straddling the summary's length would lose its tail to the
    cut and then no longer be recognised: the service redacts first."""
    from spearpy.journal.records import Step
    from spearpy.journal.view import SUMMARY_CHARS, summary
    from spearpy.observe.redact import Redactor

    secret = "sk-" + "s3cr3t" * 8
    request = {"source": "python", "name": "t"}
    shown_before = len('{"source":"python","name":"t"} -> {"output":"')
    # The secret starts a few characters before the cut.
    output = "x" * (SUMMARY_CHARS - 8 - shown_before) + secret
    step = Step(2, "tool.outcome", request, None, {"output": output})
    assert "sk-s3" in summary(step)  # cut first, the secret's start is there
    redacted = summary(step, Redactor([secret]).text)
    assert "sk-s3" not in redacted and len(redacted) <= SUMMARY_CHARS
