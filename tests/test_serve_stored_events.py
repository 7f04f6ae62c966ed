"""The service stores a bounded number of a run's events (issue 29, hole 2).

A guest churning objects (sessions, streams opened and closed) makes events
without end, and the service stored every one as a row. Past the bounds
(serve/runs.py MAX_STORED_EVENTS, MAX_STORED_EVENT_BYTES) the rest are
dropped and counted, with an `events_dropped` marker where the dropping
starts and before `run_end`.
"""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from spearpy.host import Host
from spearpy.serve import BackgroundServer, ServeConfig, create_app
from tests.test_host_bytes_churn import churn
from tests.test_serve_api import sse_events


def test_the_service_stores_a_bounded_number_of_events(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    import spearpy.serve.runs as runs

    monkeypatch.setattr(runs, "MAX_STORED_EVENTS", 50, raising=False)
    mods = tmp_path / "modules"
    mods.mkdir()
    (mods / "churn.wasm").write_bytes(churn(300, start="sessions"))
    config = ServeConfig(modules_dir=mods, state_dir=tmp_path / "state", grace=0.5,
                         host=Host(cache_dir=None, model="m").config)
    with BackgroundServer(create_app(config), grace=0.5) as server, \
            httpx.Client(base_url=server.url, timeout=30) as client:
        run = client.post("/v1/runs", json={"module": "churn", "wait": True}).json()
        assert run["exit_code"] == 0, run
        assert len(run["transcripts"]) == 300
        with client.stream("GET", run["urls"]["events"]) as response:
            events = [record for _id, record in sse_events(response)]
    seqs = [e["seq"] for e in events]
    assert seqs == sorted(set(seqs))
    kinds = [e["kind"] for e in events]
    # run_start and 300 session_close; the first 50 stored, the rest counted.
    assert kinds[:2] == ["run_start", "session_close"] and kinds[-1] == "run_end"
    markers = [e for e in events if e["kind"] == "events_dropped"]
    assert [m["at"] for m in markers] == ["limit", "run_end"]
    assert markers[0]["seq"] == 50 and markers[-1]["dropped"] == 301 - 50
    assert kinds[-2] == "events_dropped" and len(events) == 50 + 2 + 1
