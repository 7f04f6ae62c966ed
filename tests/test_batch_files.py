"""Batch inputs and the results journal, on real files."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from spearpy.batch import BatchError, read_inputs
from spearpy.batch.dispatch import Dispatch
from spearpy.batch.jobs import WORKER_LOST, BatchInput, result_record
from spearpy.batch.journal import open_results
from spearpy.batch.runner import default_layout
from spearpy.outcome import RunResult


def _inputs(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "in.jsonl"
    path.write_text(text)
    return path


def test_inputs_deliver_argv_stdin_and_env(tmp_path: Path) -> None:
    path = _inputs(tmp_path, "\n".join([
        json.dumps({"id": "a", "argv": ["x", "y"], "env": {"K": "V"}}),
        "",
        json.dumps({"stdin": "hello"}),
        json.dumps({"id": 7, "stdin_b64": base64.b64encode(b"\xff\x00").decode()}),
    ]) + "\n")
    a, b, c = read_inputs(path)
    assert (a.id, a.line, a.index, a.argv, a.env, a.stdin) == ("a", 1, 0, ("x", "y"),
                                                               {"K": "V"}, None)
    assert (b.id, b.line, b.index, b.stdin) == ("line:3", 3, 1, b"hello")
    assert (c.id, c.stdin, c.key) == (7, b"\xff\x00", "7")


@pytest.mark.parametrize("line, message", [
    ("[1, 2]", "must be a JSON object"),
    ("{not json", "not JSON"),
    ('{"argv": "x"}', "'argv' must be a list of strings"),
    ('{"env": {"A=B": "c"}}', "'env' must map"),
    ('{"stdin": "a", "stdin_b64": "YQ=="}', "not both"),
    ('{"stdin_b64": "%%%"}', "not valid base64"),
    ('{"id": true}', "'id' must be a string or an integer"),
    ('{"argv": [], "cwd": "/"}', "unknown keys ['cwd']"),
])
def test_bad_input_lines_are_named(tmp_path: Path, line: str, message: str) -> None:
    path = _inputs(tmp_path, '{"id": 1}\n' + line + "\n")
    with pytest.raises(BatchError, match=f"inputs line 2: .*{message.replace('[', '.')}"):
        read_inputs(path)


def test_duplicate_ids_are_refused(tmp_path: Path) -> None:
    path = _inputs(tmp_path, '{"id": "a"}\n{"id": 1}\n{"id": "1"}\n{"id": "a"}\n')
    with pytest.raises(BatchError, match="line 4: id 'a' was already used on line 1"):
        read_inputs(path)


def _record(ident: str | int) -> dict[str, object]:
    job = BatchInput(index=0, line=1, id=ident)
    return result_record(job, RunResult("r", 0, "exited", stdout=b"ok\xff", stderr=b""), 1)


def test_results_journal_resumes_and_repairs_a_torn_tail(tmp_path: Path) -> None:
    out = tmp_path / "sub" / "out.jsonl"
    with open_results(out) as results:
        assert results.done == set()
        results.write(_record("a"))
        results.write(_record(2))
    good = out.read_bytes()
    # A crash mid-write leaves half a line, and nothing else wrong: the torn
    # tail alone must be repaired (a corrupt line beside it would trigger the
    # rewrite by itself; tests/test_crash_repairs.py has each case apart).
    out.write_bytes(good + b'{"id": "c", "outc')
    with open_results(out) as results:
        assert results.done == {'"a"', "2"}
        results.write(_record("c"))
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["id"] for r in lines] == ["a", 2, "c"]
    # Non-UTF-8 output survives as base64.
    assert lines[0]["stdout"] is None and base64.b64decode(lines[0]["stdout_b64"]) == b"ok\xff"


def test_dispatch_retries_lost_inputs_then_reports_them() -> None:
    emitted: list[dict[str, object]] = []
    jobs = [BatchInput(index=i, line=i + 1, id=i) for i in range(2)]
    dispatch = Dispatch(jobs, emitted.append, max_attempts=2)
    first = dispatch.take()
    assert first is not None and first[1] == 1
    dispatch.lost(first[0], first[1], "killed")
    again = dispatch.take()
    assert again == (jobs[0], 2)  # back at the front, second attempt
    dispatch.lost(again[0], again[1], "killed")
    assert emitted[0]["outcome"] == WORKER_LOST and emitted[0]["attempts"] == 2
    assert emitted[0]["exit_code"] == 75  # EX_TEMPFAIL
    last = dispatch.take()
    assert last is not None
    dispatch.finished({"id": 1})
    assert dispatch.idle and dispatch.retried == 1


def test_default_layout_is_one_process_per_core() -> None:
    assert default_layout(1, cpus=8) == (1, 1)
    assert default_layout(8, cpus=2) == (2, 4)
    assert default_layout(9, cpus=2) == (2, 5)
    assert default_layout(3, cpus=16) == (3, 1)
