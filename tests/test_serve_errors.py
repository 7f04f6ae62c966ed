"""What `spearpy serve` does with an exception nobody expected in a request:
a 500 problem on a connection that stays usable, the traceback in the
service log with keys scrubbed, and nothing unscrubbed from uvicorn."""

from __future__ import annotations

import os
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from spearpy import HostConfig
from spearpy.serve import BackgroundServer, ServeConfig, create_app
from tests.test_serve_api import SAMPLES, assert_problem, events_of, modules_dir

SECRET = "cred-91d3c0a7e25b4f68"
KEY_ENV = "SPEARPY_SERVE_ERRORS_TEST_CRED"  # only key_envs knows it


async def _boom(_request: Request) -> Response:
    raise RuntimeError(f"the upstream answered {SECRET}")


async def _boom_midway(_request: Request) -> Response:
    async def body() -> AsyncIterator[bytes]:
        yield b"data: first\n\n"
        raise RuntimeError(f"midway, quoting {SECRET}")

    return StreamingResponse(body(), media_type="text/event-stream")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BackgroundServer]:
    where = tmp_path_factory.mktemp("serve-errors")
    os.environ[KEY_ENV] = SECRET
    try:
        host = HostConfig(backend=f"scripted:{SAMPLES / 'scripts' / 'multi_tool.json'}",
                          api_key_env=KEY_ENV, cache_dir=None, timeout=30)
        app = create_app(ServeConfig(modules_dir=modules_dir(where), state_dir=where / "state",
                                     host=host, grace=0.5, executor="threads"))
        # Routes that fail the way a bug would, on the real app and middleware.
        app.router.routes += [Route("/test/boom", _boom), Route("/test/midway", _boom_midway)]
        with BackgroundServer(app, grace=0.5) as running:
            yield running
    finally:
        del os.environ[KEY_ENV]


def test_an_unexpected_error_is_a_500_on_a_connection_that_stays_usable(
        server: BackgroundServer, capfd: pytest.CaptureFixture[str],
        caplog: pytest.LogCaptureFixture) -> None:
    with httpx.Client(base_url=server.url, timeout=30) as client:
        for _ in range(20):  # uvicorn used to drop the connection, at times before the 500
            reply = client.get("/test/boom")
            assert_problem(reply, 500, "internal")
            assert SECRET not in reply.text
        assert client.get("/healthz").status_code == 200
    logged = caplog.text + capfd.readouterr().err
    assert "unhandled error in GET /test/boom" in logged and "RuntimeError" in logged
    assert SECRET not in logged
    assert "Exception in ASGI application" not in logged  # uvicorn's own, unscrubbed


def test_a_response_that_fails_midway_ends_and_logs_nothing_unscrubbed(
        server: BackgroundServer, capfd: pytest.CaptureFixture[str],
        caplog: pytest.LogCaptureFixture) -> None:
    with httpx.Client(base_url=server.url, timeout=30) as client:
        with pytest.raises(httpx.RemoteProtocolError), \
                client.stream("GET", "/test/midway") as reply:
            assert reply.status_code == 200
            b"".join(reply.iter_bytes())
        assert client.get("/healthz").status_code == 200
    logged = caplog.text + capfd.readouterr().err
    assert "unhandled error in GET /test/midway" in logged and "midway, quoting" in logged
    assert SECRET not in logged


def test_a_run_the_executor_refuses_is_answered_500_every_time(tmp_path: Path) -> None:
    config = ServeConfig(modules_dir=modules_dir(tmp_path), state_dir=tmp_path / "state",
                         executor="threads", grace=0.5, max_concurrent=50,
                         host=HostConfig(cache_dir=None))
    app = create_app(config)
    with BackgroundServer(app, grace=0.5) as server, \
            httpx.Client(base_url=server.url, timeout=30) as client:
        app.state.service.runs.executor.close()
        # A slow disk: each 500 must still wait for its run's record, or the
        # list below misses the latest runs.
        store = app.state.service.store
        for _ in range(15):
            store._submit(lambda db: time.sleep(0.05))
            assert_problem(client.post("/v1/runs", json={"module": "c_hello"}), 500, "internal")
        # Each left a record: ended (not running until a restart), with its end event.
        runs = client.get("/v1/runs").json()["runs"]
        assert len(runs) == 15 and {r["outcome"] for r in runs} == {"host_error"}
        assert events_of(client, runs[0])[-1]["kind"] == "run_end"
        assert "\nspearpy_serve_runs_active 0.0\n" in client.get("/metrics").text
