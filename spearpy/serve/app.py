"""The ASGI app: `create_app(ServeConfig) -> Starlette`.

Built eagerly (store opened, Host configured, modules directory checked) so
a bad configuration fails where the app is created, not at the first
request; the parts bound to the event loop start in the lifespan, which
also drains the runs at shutdown.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.responses import JSONResponse, Response

from spearpy.config import HostConfig
from spearpy.executors.hosts import HostPool
from spearpy.host import Host
from spearpy.observe.metrics import Metrics
from spearpy.observe.redact import Redactor
from spearpy.secret_env import BUILTIN_KEY_ENVS
from spearpy.serve.config import ServeConfig
from spearpy.serve.events import EventEncoder
from spearpy.serve.executors import Executor, ThreadRuns, workers_lost
from spearpy.serve.fanout import Hub
from spearpy.serve.journal_route import JournalPages
from spearpy.serve.modules import ModuleDir, RecentModules
from spearpy.serve.problems import CatchAll, exception_handlers
from spearpy.serve.resume import Resumer, open_journals
from spearpy.serve.routes import routes
from spearpy.serve.runs import RunManager
from spearpy.serve.security import OPEN_PATHS, QUERY_TOKEN_PATHS, BodyCap
from spearpy.serve.store import RunStore
from spearpy.serve.streams import ServeStreams, StreamingRunManager
from spearpy.web.guard import JsonOnly, LoopbackOnly, TokenAuth


class Service:
    """Everything a request handler reaches through `request.app.state.service`."""

    def __init__(self, config: ServeConfig, host: Host | None) -> None:
        self.config = config
        self.modules = ModuleDir(config.modules_path)
        self.recent_modules = RecentModules()
        base = host if host is not None else Host(config.host or HostConfig())
        self.hosts = HostPool(base, owned=host is None)
        # Every backend's key, not only the default one's: a guest may pick any.
        self.redactor = Redactor.from_env([*base.key_envs(), *BUILTIN_KEY_ENVS])
        if config.token:
            self.redactor.add(config.token)
        self.encoder = EventEncoder(self.redactor, content=config.event_content,
                                    max_content_bytes=config.max_event_content_bytes)
        self.registry = CollectorRegistry()
        self.metrics = Metrics(self.registry)
        self.metrics.watch_module_cache(base.modules)  # the Host every plain request runs on
        self.rejected = Counter("spearpy_serve_runs_rejected",
                                "Runs refused with 429 (every slot busy)", registry=self.registry)
        self.started = Counter("spearpy_serve_runs_started", "Runs started, by where they ran",
                               ["executor"], registry=self.registry)
        self.hub = Hub(config.replay_buffer)
        try:
            self.store = RunStore(config.state_path,
                                  open_journals(config.state_path) if config.journal else None)
        except BaseException:
            self.hosts.close(0)
            raise
        self._runs: RunManager | None = None
        self.streams = ServeStreams()  # user streams of the runs (serve/streams.py)
        self.journal_pages = JournalPages(self)  # GET /v1/runs/{id}/journal
        self._loop: asyncio.AbstractEventLoop | None = None
        self._resuming: asyncio.Task[None] | None = None
        Gauge("spearpy_serve_runs_active", "Runs in progress", registry=self.registry
              ).set_function(lambda: self._runs.active if self._runs else 0)
        Gauge("spearpy_serve_event_subscribers", "Open event streams",
              registry=self.registry).set_function(lambda: self.hub.subscribers)
        Gauge("spearpy_serve_workers_lost", "Worker processes that died (and were replaced)",
              registry=self.registry).set_function(
            lambda: workers_lost(self._runs.executor) if self._runs else 0)

    @property
    def runs(self) -> RunManager:
        if self._runs is None:
            from spearpy.serve.problems import Problem

            raise Problem(503, "the service is starting", slug="not-ready")
        return self._runs

    @property
    def ready(self) -> bool:
        return self._runs is not None and not self._runs.draining

    def json(self, data: Any, status: int = 200, headers: dict[str, str] | None = None,
             *, redacted: tuple[str, ...] = ()) -> Response:
        # The last line of defence: whatever a handler built, no key leaves.
        # `redacted`: top-level fields taken from what this Redactor already
        # cleaned (a run's stored output and transcripts, the largest part of
        # a finished run's view), passed through instead of scanned twice.
        if not redacted or type(data) is not dict:
            return JSONResponse(self.redactor.value(data), status, headers=headers)
        scrubbed = self.redactor.value({key: value for key, value in data.items()
                                        if key not in redacted})
        body = {key: data[key] if key in redacted else scrubbed[key] for key in data}
        return JSONResponse(body, status, headers=headers)

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        executor = build_executor(self.config, self.hosts)
        try:
            await asyncio.to_thread(executor.start)  # worker processes, a Ray connection
        except BaseException:
            await asyncio.to_thread(executor.close)
            raise
        self._runs = StreamingRunManager(self.streams, self.config, self.hosts, self.store,
                                         self.hub, self.encoder, self.metrics, self._loop,
                                         self.rejected.inc, executor,
                                         lambda where: self.started.labels(where).inc())
        # Before the first request: a client reconnecting to a resumed run finds it.
        resumer = Resumer(self._runs, self.store, self.modules, self.hosts)
        resumer.adopt(self.store.resumed, self._loop)
        self._resuming = self._loop.create_task(resumer.run())

    def request_drain(self) -> None:
        """From any thread (a signal handler, a test): stop taking runs and
        start the grace period now."""
        runs, loop = self._runs, self._loop
        if runs is not None and loop is not None:
            with contextlib.suppress(RuntimeError):  # the loop already closed
                loop.call_soon_threadsafe(runs.drain)

    async def stop(self) -> None:
        runs = self._runs
        if runs is not None:
            await runs.drain()  # a resumed run still waiting for a slot ends cancelled
        if self._resuming is not None:
            await self._resuming
        await asyncio.to_thread(self.hosts.close, 5.0)
        if runs is not None:
            await asyncio.to_thread(runs.close)
        await asyncio.to_thread(self.store.close)
        self.journal_pages.close()

    def close_unstarted(self) -> None:
        """For an app whose lifespan never ran."""
        self.hosts.close(0)
        self.store.close()


def build_executor(config: ServeConfig, hosts: HostPool) -> Executor:
    """The executor --executor / --ray chose (serve/executors.py)."""
    if config.executor in ("processes", "auto"):
        from spearpy.serve.procs import ProcessRuns

        processes = ProcessRuns(hosts.base.config, config.max_concurrent, config.workers,
                                config.max_resumes, grace=config.watch_grace,
                                silence=config.watch_silence)
        if config.executor == "processes":
            return processes
        from spearpy.serve.auto import AutoRuns

        return AutoRuns(ThreadRuns(config.max_concurrent), processes)
    if config.executor == "ray":
        from spearpy.serve.ray_runs import RayRuns

        assert config.ray_address is not None  # ServeConfig checks it
        return RayRuns(config.ray_address, hosts.base.config, config.max_concurrent,
                       config.workers, config.max_resumes, grace=config.watch_grace,
                       silence=config.watch_silence)
    return ThreadRuns(config.max_concurrent)


def create_app(config: ServeConfig, host: Host | None = None) -> Starlette:
    """The service as an ASGI app. `host`: run on this Host (yours to close)
    instead of one built from `config.host`."""
    service = Service(config, host)

    @contextlib.asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        try:
            await service.start()
        except BaseException:
            # No runs yet; the state directory's lock must not outlive us.
            await asyncio.to_thread(service.close_unstarted)
            raise
        try:
            yield
        finally:
            await service.stop()

    # The rule every HTTP surface follows (web/guard.py), then the body cap.
    served = routes()
    middleware = [Middleware(TokenAuth, token=config.token, redactor=service.redactor,
                             open_paths=OPEN_PATHS, query_paths=QUERY_TOKEN_PATHS),
                  Middleware(JsonOnly, redactor=service.redactor, routes=served),
                  Middleware(BodyCap, max_bytes=config.max_body_bytes,
                             redactor=service.redactor)]
    if config.token is None:
        # No token: only this machine may call, so refuse the Host names a
        # DNS-rebinding page would send from a browser here.
        middleware.insert(0, Middleware(LoopbackOnly, redactor=service.redactor))
    middleware.insert(0, Middleware(CatchAll, redactor=service.redactor))
    app = Starlette(routes=served, middleware=middleware,
                    exception_handlers=exception_handlers(service.redactor), lifespan=lifespan)
    app.state.service = service
    return app


def static_dir() -> str:
    return os.path.join(os.path.dirname(__file__), "static")
