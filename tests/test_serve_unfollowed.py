"""A run nobody follows: its events are stored, not handed to the event
loop (runs.py, fanout.Channel.followed); a subscriber who comes later reads
them from the store, then live, with no gap and no repeat."""

from __future__ import annotations

import time
from pathlib import Path

import httpx

from spearpy import HostConfig
from spearpy.serve import BackgroundServer, ServeConfig, create_app
from tests.test_serve_api import modules_dir, slow_script, sse_events


def test_a_run_followed_midway_streams_every_event_once(tmp_path: Path) -> None:
    config = ServeConfig(modules_dir=modules_dir(tmp_path), state_dir=tmp_path / "state",
                         host=HostConfig(backend=f"scripted:{slow_script(tmp_path, 150)}",
                                         cache_dir=None))
    with BackgroundServer(create_app(config)) as server, \
            httpx.Client(base_url=server.url, timeout=30) as client:
        service = server.app.state.service
        run = client.post("/v1/runs", json={"module": "c_multi_tool"}).json()
        deadline = time.monotonic() + 30
        while len(service.store.events(run["id"])) < 3:  # some events are in
            assert time.monotonic() < deadline, "the run made no events"
            time.sleep(0.02)
        channel = service.hub.get(run["id"])
        assert channel is not None and not channel.followed
        assert channel.first_seq() is None  # stored, never published
        with client.stream("GET", run["urls"]["events"]) as response:
            ids = [event_id for event_id, _ in sse_events(response)]
            assert channel.followed
        last = client.get(run["urls"]["self"]).json()
    assert ids == list(range(len(ids))) and len(ids) > 3
    assert last["status"] == "finished"
    # The live part came published: the buffer took the events after the
    # subscriber came (not all of them: the first ones are only stored).
    assert channel.ended
