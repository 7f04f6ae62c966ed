"""The file store after damage, each way apart: a torn tail alone (a crash
mid-append, or the zeros a power cut leaves), a corrupt middle alone, both.
A torn tail is dropped, on read and on open for append; a damaged complete
line is an error naming it, and nothing is skipped or rewritten."""

from __future__ import annotations

import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from spearpy.journal import (
    FileJournalStore,
    JournalCorrupt,
    JournalError,
    JournalWriter,
    Step,
    SyncPolicy,
)
from spearpy.journal.records import hostcall_answer
from spearpy.observe.scrub import SecretScrubber

ROOT = Path(__file__).resolve().parent.parent
STEPS = 6
RANDOM = {"call": "system.random_i64", "args": []}


def _random(n: int) -> dict[str, object]:
    return hostcall_answer(n, [], 0.0, SecretScrubber())


def _random_line(seq: int, n: int) -> bytes:
    return (b'{"seq":%d,"kind":"hostcall","request":{"call":"system.random_i64","args":[]},'
            b'"answer":{"rc":%d,"writes":[],"t":0.0}}' % (seq, n))


def _write(store: FileJournalStore, journal_id: str = "run", steps: int = STEPS) -> Path:
    with JournalWriter.open(store, journal_id) as journal:
        journal.start(module=b"m", argv=[], env=[], stdin=b"", limits={}, flags={})
        for i in range(steps):
            journal.append("hostcall", RANDOM, _random(i))
    return store.path_of(journal_id)


def _answers(store: FileJournalStore) -> list[int]:
    return [r.answer["rc"] for r in store.records("run") if isinstance(r, Step)]


def _corrupt_line(data: bytes, number: int) -> bytes:
    lines = data.split(b"\n")
    lines[number - 1] = lines[number - 1][:10] + b"\xa5\x00garbage" + lines[number - 1][20:]
    return b"\n".join(lines)


@pytest.mark.parametrize("tail", [b'{"seq":7,"kind":"hostcall","request":{"call":"sys',
                                  b"\0" * 300,
                                  _random_line(7, 7)])  # whole but for its newline
def test_a_torn_tail_alone_is_dropped_and_cut_off(tmp_path: Path, tail: bytes) -> None:
    store = FileJournalStore(tmp_path)
    path = _write(store)
    whole = path.read_bytes()
    path.write_bytes(whole + tail)
    assert _answers(store) == list(range(STEPS))  # the read drops it, leaves the file
    assert path.read_bytes().endswith(tail)
    with JournalWriter.open(store, "run") as journal:
        assert journal.next_seq == STEPS + 1
        journal.append("hostcall", RANDOM, _random(99))
    assert _answers(store) == [*range(STEPS), 99]  # the new record starts a line of its own
    assert path.read_bytes() == whole + _random_line(7, 99) + b"\n"


@pytest.mark.parametrize("line", [2, 4, STEPS + 1])
def test_a_corrupt_middle_alone_is_an_error_naming_the_line(tmp_path: Path, line: int) -> None:
    store = FileJournalStore(tmp_path)
    path = _write(store)
    damaged = _corrupt_line(path.read_bytes(), line)
    path.write_bytes(damaged)
    with pytest.raises(JournalCorrupt, match=f"journal 'run' line {line}: not JSON"):
        list(store.records("run"))
    with pytest.raises(JournalCorrupt, match=f"line {line}"):
        JournalWriter.open(store, "run")
    assert path.read_bytes() == damaged  # nothing repaired away


def test_both_a_torn_tail_and_a_corrupt_middle(tmp_path: Path) -> None:
    """The tail's repair must not hide the middle's damage, nor run before it is reported."""
    store = FileJournalStore(tmp_path)
    path = _write(store)
    damaged = _corrupt_line(path.read_bytes(), 3) + b'{"seq":7,"ki'
    path.write_bytes(damaged)
    with pytest.raises(JournalCorrupt, match="line 3"):
        list(store.records("run"))
    with pytest.raises(JournalCorrupt, match="line 3"):
        JournalWriter.open(store, "run")
    assert path.read_bytes() == damaged


@pytest.mark.parametrize(("edit", "problem"), [
    (lambda lines: [lines[0], lines[2], lines[1], *lines[3:]], "line 2 has seq 2, expected 1"),
    (lambda lines: [lines[0], *lines[2:]], "line 2 has seq 2, expected 1"),
    (lambda lines: [lines[0], lines[1], lines[1], *lines[2:]], "line 3 has seq 1, expected 2"),
    (lambda lines: lines[1:], "line 1 has seq 1, expected 0"),
])
def test_lines_out_of_order_are_an_error(tmp_path: Path, edit: object, problem: str) -> None:
    """What two interleaved writers would leave: never read as a journal."""
    store = FileJournalStore(tmp_path)
    path = _write(store)
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"".join(edit(lines)))  # type: ignore[operator]
    with pytest.raises(JournalCorrupt, match=problem):
        list(store.records("run"))


def test_a_line_longer_than_a_record_may_be_is_not_read(tmp_path: Path) -> None:
    store = FileJournalStore(tmp_path, max_record_bytes=1000)
    path = _write(store)
    path.write_bytes(path.read_bytes() + b"x" * 5000)  # even as a tail
    with pytest.raises(JournalCorrupt, match="line 8 is longer than a record may be"):
        list(store.records("run"))


def test_a_failed_append_leaves_no_half_line(tmp_path: Path) -> None:
    """A write cut short (the disk full, here RLIMIT_FSIZE) is cut back off: the
    next append must not follow half a line, which would be a corrupt middle."""
    script = textwrap.dedent(f"""
        import resource, signal, sys
        sys.path.insert(0, {str(ROOT)!r})
        from spearpy.journal import FileJournalStore, JournalError, JournalWriter
        from spearpy.journal.records import hostcall_answer
        from spearpy.observe.scrub import SecretScrubber
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG instead of a kill
        store = FileJournalStore({str(tmp_path)!r})
        journal = JournalWriter.open(store, "run")
        journal.start(module=b"m", argv=[], env=[], stdin=b"", limits={{}}, flags={{}})
        size = journal.bytes_used
        _, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
        resource.setrlimit(resource.RLIMIT_FSIZE, (size + 100, hard))
        try:
            journal.append("tool.outcome", None, {{"text": "x" * 500}})
        except JournalError as exc:
            print("refused:", exc)
        resource.setrlimit(resource.RLIMIT_FSIZE, (hard, hard))
        journal.append("hostcall", {{"call": "system.random_i64", "args": []}},
                       hostcall_answer(1, [], 0.0, SecretScrubber()))
        journal.close()
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert "refused:" in done.stdout and "File too large" in done.stdout
    store = FileJournalStore(tmp_path)
    assert _answers(store) == [1]


def test_the_file_is_private_and_ids_cannot_leave_the_directory(tmp_path: Path) -> None:
    store = FileJournalStore(tmp_path / "journals")
    path = _write(store)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    for bad in ("../escape", "a/b", ".hidden", "", "x" * 201, "-rf", "a\nb", "a\0b"):
        with pytest.raises(JournalError, match="bad journal id"):
            store.open_writer(bad)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["journals"]
    assert [p.name for p in (tmp_path / "journals").iterdir()] == ["run.jsonl"]


@pytest.mark.parametrize("sync", list(SyncPolicy))
def test_every_fsync_policy_writes_the_same_journal(tmp_path: Path, sync: SyncPolicy) -> None:
    store = FileJournalStore(tmp_path)
    with JournalWriter.open(store, "run", sync=sync) as journal:
        journal.start(module=b"m", argv=[], env=[], stdin=b"", limits={}, flags={})
        journal.append("hostcall", RANDOM, _random(5))
        journal.sync()
        journal.end("exited", 0)
    assert [r.kind for r in store.records("run")] == ["start", "hostcall", "end"]
    assert [(j.id, j.ended) for j in store.list()] == [("run", True)]
