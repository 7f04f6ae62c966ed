"""A resume starts the run with what its journal recorded: its own limits
(Host.run(limits=...), as the service's and workers' runs have them), and a
module its run was given as bytes (a service's, a worker's), which
`spearpy resume --module FILE` gives as bytes again."""

from __future__ import annotations

import json
import threading
from pathlib import Path

from spearpy.config import HostConfig
from spearpy.durable import JournalSpec
from spearpy.host import Host
from spearpy.outcome import RunResult
from spearpy.testing import ScriptedServer
from tests.test_durable_cli import (
    MULTI_SCRIPT,
    MULTI_WASM,
    SAMPLES,
    _cut,
    _kinds,
    _spearpy,
)

LOOP = SAMPLES / "c_infinite_loop.wasm"
WAIT_S = 60.0


def test_a_resumed_run_keeps_its_own_timeout(tmp_path: Path) -> None:
    journal = tmp_path / "loop.jsonl"
    with Host(HostConfig(cache_dir=None, base_url="http://127.0.0.1:9/v1",
                         api_key_env="")) as host:
        ended = host.run(LOOP, limits={"timeout": 1.0}, journal=JournalSpec(journal))
        assert ended.outcome == "timeout", ended
        cut = _cut(journal, tmp_path / "cut.jsonl", _kinds(journal).index("end"))
        # Bounded by the test, not the run: without its timeout it loops for ever.
        stop = threading.Event()
        results: list[RunResult | BaseException] = []

        def resume() -> None:
            try:
                results.append(host.resume(JournalSpec(cut), cancel=stop))
            except BaseException as exc:  # reported below
                results.append(exc)

        worker = threading.Thread(target=resume)
        worker.start()
        worker.join(WAIT_S)
        stop.set()
        worker.join(WAIT_S)
    assert len(results) == 1 and isinstance(results[0], RunResult), results
    assert (results[0].outcome, results[0].exit_code) == ("timeout", 124), results[0]
    assert _kinds(cut)[-1] == "end"


def test_spearpy_resume_goes_on_with_a_run_given_its_module_as_bytes(tmp_path: Path) -> None:
    journal = tmp_path / "bytes.jsonl"
    with ScriptedServer(MULTI_SCRIPT) as server:
        with Host(HostConfig(cache_dir=None, base_url=server.base_url, model="m1",
                             api_key_env="")) as host:
            done = host.run(MULTI_WASM.read_bytes(), journal=JournalSpec(journal))
        assert done.ok, done
        records = [json.loads(line) for line in journal.read_text().splitlines()]
        assert records[0]["flags"]["module"] is None  # a run given bytes names no file
        cut = _cut(journal, tmp_path / "cut.jsonl", 4)
        before = len(server.requests)

        resumed = _spearpy("resume", cut, "--module", MULTI_WASM, cwd=tmp_path)

        assert resumed.returncode == 0, resumed.stderr
        assert resumed.stdout == done.stdout.decode()
        assert 0 < len(server.requests) - before < len(records)
    assert _kinds(cut)[-1] == "end"
