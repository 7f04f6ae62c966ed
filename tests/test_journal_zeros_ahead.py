"""The file store writes a journal's lines into zeros it wrote ahead
(fdatasync then flushes data alone): readers stop at the zeros, a closed
journal is its records alone, and a crash or power cut that leaves zeros
(at the end, or between lines) loses no record before them."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from spearpy.journal import FileJournalStore, JournalError, JournalWriter, Step, SyncPolicy
from tests.test_journal_file import RANDOM, ROOT, _answers, _random, _random_line, _write


def _lines_of(data: bytes) -> list[bytes]:
    return data.split(b"\n")[:-1]


@pytest.mark.parametrize("sync", list(SyncPolicy))
def test_an_open_writer_keeps_zeros_ahead_which_its_close_cuts_off(
        tmp_path: Path, sync: SyncPolicy) -> None:
    store = FileJournalStore(tmp_path)
    path = store.path_of("run")
    writer = JournalWriter.open(store, "run", sync=sync)
    writer.start(module=b"m", argv=[], env=[], stdin=b"", limits={}, flags={})
    for n in range(5):
        writer.append("hostcall", RANDOM, _random(n))
    data = path.read_bytes()
    assert len(data) > writer.bytes_used and not data[writer.bytes_used:].strip(b"\0")
    # Every reader sees the records, and only them, while the writer runs.
    assert _answers(store) == list(range(5))
    last = store.last_record("run")
    assert isinstance(last, Step) and last.seq == 5
    info = store.info("run")
    assert info is not None and not info.ended
    writer.end("exited", 0)
    info = store.info("run")
    assert info is not None and info.ended
    writer.close()
    data = path.read_bytes()
    assert b"\0" not in data and len(data) == writer.bytes_used
    assert len(_lines_of(data)) == 7


def test_a_long_journal_outgrows_its_zeros_and_reads_whole_all_along(tmp_path: Path) -> None:
    store = FileJournalStore(tmp_path)
    big = "x" * 3000  # past the first 64 KiB of zeros after ~20 records, past 1 MiB later
    with JournalWriter.open(store, "run") as writer:
        writer.start(module=b"m", argv=[], env=[], stdin=b"", limits={}, flags={})
        for n in range(400):
            writer.append("tool.outcome", {"name": "t", "n": n}, {"output": big})
            if n % 97 == 0:
                assert [r.seq for r in store.records("run")] == list(range(n + 2))
        writer.sync()
    assert [r.seq for r in store.records("run")] == list(range(401))
    assert b"\0" not in store.path_of("run").read_bytes()


_KILLED = textwrap.dedent("""
    import os, signal, sys
    from spearpy.journal import FileJournalStore, JournalWriter
    from spearpy.journal.records import hostcall_answer
    from spearpy.observe.scrub import SecretScrubber
    writer = JournalWriter.open(FileJournalStore(sys.argv[1]), "run")
    writer.start(module=b"m", argv=[], env=[], stdin=b"", limits={}, flags={})
    for n in range(4):
        writer.append("hostcall", {"call": "system.random_i64", "args": []},
                      hostcall_answer(n, [], 0.0, SecretScrubber()))
    if sys.argv[2] == "end":
        writer.end("exited", 0)  # written; the close that cuts the zeros never comes
    writer.flush()
    os.kill(os.getpid(), signal.SIGKILL)
""")


def _killed_writer(directory: Path, ending: str) -> Path:
    done = subprocess.run([sys.executable, "-c", _KILLED, str(directory), ending],
                          cwd=ROOT, capture_output=True, timeout=60)
    assert done.returncode == -signal.SIGKILL, done.stderr.decode()[-2000:]
    path = directory / "run.jsonl"
    assert path.read_bytes().endswith(b"\0" * 512)  # the zeros it wrote ahead stay
    return path


def test_a_killed_writers_zeros_are_cut_off_by_the_resume(tmp_path: Path) -> None:
    path = _killed_writer(tmp_path, "running")
    store = FileJournalStore(tmp_path)
    assert _answers(store) == list(range(4))
    info = store.info("run")
    assert info is not None and not info.ended
    with JournalWriter.open(store, "run") as writer:
        assert writer.next_seq == 5
        writer.append("hostcall", RANDOM, _random(4))
        writer.end("exited", 0)
    data = path.read_bytes()
    assert b"\0" not in data
    assert _answers(store) == list(range(5))
    assert _lines_of(data)[-2] == _random_line(5, 4)


def test_a_killed_writers_end_record_before_its_zeros_still_ends_the_journal(
        tmp_path: Path) -> None:
    _killed_writer(tmp_path, "end")
    store = FileJournalStore(tmp_path)
    info = store.info("run")
    assert info is not None and info.ended
    assert [journal.ended for journal in store.list()] == [True]
    last = store.last_record("run")
    assert last is not None and last.kind == "end"
    with pytest.raises(JournalError, match="has ended"):
        JournalWriter.open(store, "run")


def test_zeros_a_power_cut_leaves_between_lines_end_the_records(tmp_path: Path) -> None:
    """Pages written back out of order, then a power cut: a later sector
    reached the disk, an earlier one did not. The records end at the zeros
    (none after them was synced), and a resume cuts the rest off."""
    store = FileJournalStore(tmp_path)
    path = _write(store, steps=3)
    whole = path.read_bytes()
    hole = b"\0" * (512 - len(whole) % 512 + 512)  # to a sector's end, and one more
    end = b'{"seq":5,"kind":"end","outcome":"exited","exit_code":0}'
    later = _random_line(4, 40) + b"\n" + end + b"\n"
    path.write_bytes(whole + hole + later + b"\0" * 700)
    assert _answers(store) == [0, 1, 2]
    last = store.last_record("run")
    assert isinstance(last, Step) and last.seq == 3
    info = store.info("run")
    assert info is not None and not info.ended  # the end record after the zeros is not read
    with JournalWriter.open(store, "run") as writer:
        assert writer.next_seq == 4
        writer.append("hostcall", RANDOM, _random(3))
    assert _answers(store) == [0, 1, 2, 3]
    assert path.read_bytes() == whole + _random_line(4, 3) + b"\n"
    # What followed the zeros is kept beside the journal, not lost.
    aside = tmp_path / f"run.jsonl.cut-{len(whole)}"
    assert aside.read_bytes() == hole + later + b"\0" * 700
    assert oct(aside.stat().st_mode & 0o777) == "0o600"
    assert [j.id for j in store.list()] == ["run"]


def test_a_killed_writers_zeros_alone_are_not_set_aside(tmp_path: Path) -> None:
    _killed_writer(tmp_path, "running")
    with JournalWriter.open(FileJournalStore(tmp_path), "run"):
        pass
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.jsonl"]


def test_a_zero_byte_amid_a_lines_text_is_damage_not_an_end(tmp_path: Path) -> None:
    """A zero byte with text after it in its sector is no write-ahead's or
    power cut's: its line is reported damaged, not the journal cut there."""
    store = FileJournalStore(tmp_path)
    path = _write(store, steps=3)
    lines = path.read_bytes().split(b"\n")
    lines[2] = lines[2][:20] + b"\0" + lines[2][21:]
    damaged = b"\n".join(lines)
    path.write_bytes(damaged)
    with pytest.raises(JournalError, match="line 3"):
        list(store.records("run"))
    with pytest.raises(JournalError, match="line 3"):
        JournalWriter.open(store, "run")
    assert path.read_bytes() == damaged
    assert os.path.getsize(path) == len(damaged)


@pytest.mark.parametrize(("chunk", "offset", "end"), [
    (b"abc\n" + b"\0" * 508, 0, 4),  # zeros to the sector's end
    (b"ab\0c\n" + b"x" * 507, 0, -1),  # a zero amid text: damage, no end
    (b"ab\0c" + b"\0" * 508, 0, 4),  # text, then zeros to the sector's end
    (b"x" * 600 + b"\0" * 10, 0, 600),  # zeros to the chunk's (the file's) end
    (b"x" * 510 + b"\0y" + b"\0" * 512, 0, 512),  # the next sector, all zeros
    (b"x" * 10 + b"\0" * 20 + b"y", 500, 10),  # read at 500: zeros from 510 reach 512
    (b"x" * 20 + b"\0" * 2 + b"y", 500, -1),  # read at 500: text at 522, before 1024
    (b"\0x" * 4096, 0, -1),  # zeros all amid text
])
def test_where_zeros_end_the_records(chunk: bytes, offset: int, end: int) -> None:
    from spearpy.journal.filestore import _zeros_from

    assert _zeros_from(chunk, offset) == end
