"""A stream session asked for a run the restarted service is resuming
(serve/streams.py create_session): retry (503) while it waits for a slot,
a token once it runs, even when it starts while the request reads the run's
record (it found no hub before the read and none of the reasons after)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from spearpy import HostConfig
from spearpy.serve import BackgroundServer, ServeConfig, create_app
from spearpy.serve.streams_auth import Verdict
from spearpy.streams import StreamHub
from tests.test_serve_api import modules_dir


def test_a_resumed_run_that_starts_during_the_read_gets_its_token(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = ServeConfig(modules_dir=modules_dir(tmp_path), state_dir=tmp_path / "state",
                         host=HostConfig(cache_dir=None))
    with BackgroundServer(create_app(config)) as server, \
            httpx.Client(base_url=server.url, timeout=30) as client:
        service = server.app.state.service
        streams = service.streams
        run_id = "0123456789abcdef"
        streams.resuming.add(run_id)
        hub = StreamHub(streams.limits)
        url = f"/api/v1/executions/{run_id}/streams/session"

        def record(asked: str, *, output: bool = True) -> dict[str, Any]:
            return {"id": asked, "status": "running"}

        monkeypatch.setattr(service.store, "get_run", record)
        waiting = client.post(url, json={})
        assert waiting.status_code == 503, waiting.text
        assert waiting.json()["type"].endswith("run-resuming")

        def record_as_the_run_starts(asked: str, *, output: bool = True) -> dict[str, Any]:
            # What StreamingRunManager._host_for does once a slot is free.
            streams.resuming.discard(run_id)
            streams.hubs[run_id] = hub
            return record(asked)

        monkeypatch.setattr(service.store, "get_run", record_as_the_run_starts)
        answer = client.post(url, json={})
        assert answer.status_code == 200, answer.text
        token = answer.json()["token"]
        assert streams.tokens.check(token, run_id) is Verdict.OK
        assert streams.tokens.check(token, "another") is Verdict.OTHER_RUN
        streams.hubs.pop(run_id)
