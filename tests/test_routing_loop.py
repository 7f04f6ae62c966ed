"""A real guest's auto tool loop, routed anew each iteration: a tool result
that matches a locked content route moves the next completion; the run
records (which backend answered each exchange) and replays offline."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from spearpy.host import Host
from tests.test_backends_kit import MULTI_SCRIPT, MULTI_STDOUT, MULTI_WASM
from tests.test_routing_kit import refused_url, routing_config

# c_multi_tool's second tool result is {"product":20}: from then on the
# history holds it, and the route keeps every later completion local.
TABLES = """
[[routes]]
name = "private"
match = { content = ['"product"'] }
to = ["local"]
lock = true

[[routes]]
name = "default"
to = ["down", "hosted"]
"""


def run(path: Path, **config: Any) -> tuple[Any, Host]:
    host = Host(config_file=path, cache_dir=None, max_retries=0, **config)
    try:
        return host.run(MULTI_WASM, collect_events=True), host
    finally:
        host.close()


def routes_of(result: Any) -> list[dict[str, Any]]:
    return [e.data["route"] for e in result.events
            if e.kind == "completion_end" and "route" in e.data]


def test_a_tool_result_moves_the_rest_of_the_loop_to_the_local_model(
        scripted: Any, tmp_path: Path) -> None:
    local, hosted = scripted(MULTI_SCRIPT), scripted(MULTI_SCRIPT)
    path = routing_config(tmp_path / "c.toml", {
        "hosted": hosted.base_url, "local": local.base_url, "down": refused_url()}, TABLES)
    result, _host = run(path)
    assert result.stdout.decode() == MULTI_STDOUT, result.stderr
    assert result.exit_code == 0
    records = routes_of(result)
    assert [(r["route"], r["chosen"]) for r in records] == [
        ("default", "hosted"), ("default", "hosted"), ("private", "local"),
        ("private", "local")]
    assert [t["backend"] for t in records[0]["tried"]] == ["down"]
    assert len(hosted.requests) == 2 and len(local.requests) == 2
    # The hosted model never saw the product; the local one got the history.
    assert all('"product"' not in json.dumps(r.body) for r in hosted.requests)
    assert local.requests[0].body["model"] == "local-model"
    (transcript,) = result.transcripts
    assert transcript["routes"] == records


def test_a_routed_run_records_and_replays_offline(scripted: Any, tmp_path: Path) -> None:
    local, hosted = scripted(MULTI_SCRIPT), scripted(MULTI_SCRIPT)
    path = routing_config(tmp_path / "c.toml", {
        "hosted": hosted.base_url, "local": local.base_url, "down": refused_url()}, TABLES)
    cassette = tmp_path / "run.cassette.json"
    recorded, _host = run(path, record=cassette)
    assert recorded.exit_code == 0
    exchanges = json.loads(cassette.read_text())["exchanges"]
    # Each exchange keeps the backend that answered it (or failed to).
    assert [x["backend"] for x in exchanges] == ["down", "hosted", "down", "hosted", "local",
                                                 "local"]
    assert "error" in exchanges[0] and exchanges[1]["response"]["status"] == 200
    local.stop()
    hosted.stop()
    again = tmp_path / "again.cassette.json"
    host = Host(config_file=path, backend=f"replay:{cassette}", record=again, cache_dir=None)
    try:
        replayed = host.run(MULTI_WASM, collect_events=True)
        assert host.replay_mismatch() is None
    finally:
        host.close()
    assert replayed.stdout == recorded.stdout and replayed.exit_code == 0
    assert [r["chosen"] for r in routes_of(replayed)] == ["hosted", "hosted", "local", "local"]
    assert again.read_bytes() == cassette.read_bytes()


def test_a_replay_without_the_routes_diverges_at_the_first_routed_exchange(
        scripted: Any, tmp_path: Path) -> None:
    local, hosted = scripted(MULTI_SCRIPT), scripted(MULTI_SCRIPT)
    path = routing_config(tmp_path / "c.toml", {
        "hosted": hosted.base_url, "local": local.base_url, "down": refused_url()}, TABLES)
    cassette = tmp_path / "run.cassette.json"
    run(path, record=cassette)
    plain = routing_config(tmp_path / "plain.toml", {"hosted": hosted.base_url})
    host = Host(config_file=plain, backend=f"replay:{cassette}", cache_dir=None)
    try:
        host.run(MULTI_WASM)
        mismatch = host.replay_mismatch()
    finally:
        host.close()
    assert mismatch is not None and "went to backend 'hosted'; the recording has 'down'" in mismatch
