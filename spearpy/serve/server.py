"""Serving the app with uvicorn: in the foreground with signal handling
(`spearpy serve`), or on a background thread (tests, notebooks)."""

from __future__ import annotations

import logging
import re
import socket
import sys
import threading
from types import FrameType
from typing import Any

import uvicorn
from starlette.applications import Starlette

from spearpy.streams.limits import StreamLimits
from spearpy.web.connections import connection_options

# The event stream takes the token in its query (EventSource sends no
# headers): keep it out of the access log.
_TOKEN_IN_QUERY = re.compile(r"((?:access_)?token=)[^&\s]*")


class _TokenFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple):
            record.args = tuple(_TOKEN_IN_QUERY.sub(r"\1[redacted]", a) if isinstance(a, str)
                                else a for a in record.args)
        return True


def hide_tokens_in_access_log() -> None:
    logger = logging.getLogger("uvicorn.access")
    if not any(isinstance(f, _TokenFilter) for f in logger.filters):
        logger.addFilter(_TokenFilter())


def _uvicorn_config(app: Starlette, host: str, port: int, grace: float,
                    **options: Any) -> uvicorn.Config:
    # uvicorn waits this long for open connections before the lifespan
    # shutdown; the drain (started at the signal) ends them within the grace,
    # so this is only a backstop.
    # A WebSocket message is one SSF frame: uvicorn must not read one far
    # larger than the stream limit (its default is 16 MiB) before the check.
    options.setdefault("ws_max_size", StreamLimits().max_frame_bytes + 64)
    # h11 refuses a request head over 16 KiB; httptools, which uvicorn picks
    # whenever it is installed (uvicorn[standard]), reads one without limit.
    # Bounded further: how many connections, how long a head may take.
    if "http" not in options:
        config = app.state.service.config
        for key, value in connection_options(config.max_connections,
                                             config.head_timeout).items():
            options.setdefault(key, value)
    return uvicorn.Config(app, host=host, port=port, lifespan="on",
                          timeout_graceful_shutdown=int(grace) + 15, **options)


class _DrainingServer(uvicorn.Server):
    """uvicorn's server, which also starts the service's drain on SIGTERM/SIGINT."""

    def __init__(self, config: uvicorn.Config, app: Starlette) -> None:
        super().__init__(config)
        self._app = app

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        self._app.state.service.request_drain()
        super().handle_exit(sig, frame)
        # uvicorn re-raises the signal once it has stopped, so the process
        # dies of it; a drained service has done what the signal asked and
        # exits 0, as process managers expect of a clean stop.
        captured = getattr(self, "_captured_signals", None)
        if isinstance(captured, list):
            captured.clear()

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if self.started:
            # The bound port, which differs from --port 0; scripts read this line.
            host, port = self.servers[0].sockets[0].getsockname()[:2]
            shown = f"[{host}]" if ":" in host else host
            print(f"spearpy serve: listening on http://{shown}:{port}/", file=sys.stderr,
                  flush=True)


def serve(app: Starlette, host: str, port: int, grace: float, **options: Any) -> None:
    """Serve until SIGTERM/SIGINT, then drain: stop accepting, let runs finish
    within `grace` seconds, cancel the rest, close the store."""
    hide_tokens_in_access_log()
    _DrainingServer(_uvicorn_config(app, host, port, grace, **options), app).run()


class BackgroundServer:
    """The app on a uvicorn server on a thread; port 0 picks a free port.

        with BackgroundServer(create_app(config)) as server:
            httpx.get(server.url + "/healthz")
    """

    def __init__(self, app: Starlette, host: str = "127.0.0.1", port: int = 0,
                 grace: float = 10.0, **options: Any) -> None:
        options.setdefault("log_level", "warning")
        self.app = app
        self._server = uvicorn.Server(_uvicorn_config(app, host, port, grace, **options))
        self._thread = threading.Thread(target=self._server.run, name="spearpy-serve",
                                        daemon=True)
        self.host = host
        self.port = port

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self, timeout: float = 30.0) -> BackgroundServer:
        self._thread.start()
        for _ in range(int(timeout * 100)):
            if self._server.started or not self._thread.is_alive():
                break
            threading.Event().wait(0.01)
        if not self._server.started:
            raise RuntimeError("the service did not start (see the log)")
        self.port = self._server.servers[0].sockets[0].getsockname()[1]
        return self

    def stop(self, timeout: float = 60.0) -> None:
        """What SIGTERM does: drain, then stop."""
        self.app.state.service.request_drain()
        self._server.should_exit = True
        self._thread.join(timeout)

    def __enter__(self) -> BackgroundServer:
        return self.start()

    def __exit__(self, *_exc: object) -> None:
        self.stop()
