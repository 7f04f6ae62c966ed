"""Host: one wasmtime Engine, a compiled-module cache and the upstream backends.

Thread-safe: a Host is configured once and shared; every `run` gets its own
Store on the calling thread. The Engine, the Linker (with its InstancePre per
module) and the HTTP client are shared by all runs.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import threading
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import wasmtime

from spearpy import wasi_runtime
from spearpy.backends.catalog import BackendCatalog
from spearpy.config import HostConfig
from spearpy.config_file import read_config_file
from spearpy.context import GuestLogSink, RunOptions, RunServices, SendHook, run_config
from spearpy.embed import RunHandle, start_run
from spearpy.engine import EpochTicker, engine_config
from spearpy.errors import ConfigError, ModuleLoadError
from spearpy.hostcalls import define_spear_imports
from spearpy.instance import GuestRun
from spearpy.modcache import ModuleCache
from spearpy.modload import LoadedModule, carry_over, compile_module, link
from spearpy.observe.events import Event, EventSink
from spearpy.outcome import RunResult
from spearpy.secret_env import passed_through
from spearpy.tools.sources import HostTools, task_policy

# LoadedModule lives in modload.py; embedders and serve/ import it from here.
__all__ = ["CLOSE_GRACE_S", "Host", "LoadedModule"]

if TYPE_CHECKING:
    from spearpy.backends.base import Backend
    from spearpy.chat.session import ChatSession
    from spearpy.durable import JournalSpec
    from spearpy.streams.hub import StreamHub
    from spearpy.tools.python import PythonTools

# How long close() waits for cancelled runs to end before closing the backends
# (which also ends a run still waiting on an upstream answer).
CLOSE_GRACE_S = 5.0


class Host:
    def __init__(self, config: HostConfig | None = None, *,
                 python_tools: PythonTools | None = None,
                 mcp_servers: Iterable[Any] = (), **overrides: Any) -> None:
        """`python_tools` are offered to every session; `mcp_servers` adds MCP
        registry records (ServerRecord objects, dicts in the TOML shape, or
        paths) to the `mcp_dirs` ones."""
        if config is None:
            config = HostConfig(**overrides)
        elif overrides:
            config = config.model_copy(update=overrides)
        self.config = config
        self.limit_policy = config.limit_policy()
        self.engine = wasmtime.Engine(engine_config())
        self._linker = wasmtime.Linker(self.engine)
        self._linker.define_wasi()
        define_spear_imports(self._linker)
        # LRU by bytes of compiled code (config.module_cache_bytes); its own lock.
        self.modules = ModuleCache(config.module_cache_bytes)
        self._lock = threading.Lock()
        self._backend_lock = threading.Lock()
        self._backends: dict[str, Backend] = {}
        self._own_names: set[str] = set()  # names given to use_backend
        # Read now: a broken config file or cassette fails the Host, not a send.
        self._catalog = BackendCatalog.from_config(config)
        # None unless the config routes ([models] aliases, [[routes]]).
        self._router = self._catalog.router(self._named_backend)
        # The task layer is the operator's: a typo in it fails the Host. The
        # config file's [task] and [mcp] tables come first, flags and fields win.
        file_dirs, file_servers, file_task = _config_file_tables(config)
        self._task_params = {**file_task, **config.task_params}
        self.task_policy = task_policy(self._task_params)
        self.tools = HostTools(
            python_tools=python_tools, mcp_dirs=[*file_dirs, *config.mcp_dirs],
            mcp_servers=[*file_servers, *mcp_servers],
            secrets=[os.environ.get(name, "") for name in self.key_envs()])
        # What a run uses of this Host: handed down, so nothing below reaches it.
        self.services = RunServices(backend_for=self.backend_for, tools=self.tools,
                                    limit_policy=self.limit_policy, key_envs=self.key_envs,
                                    routes_of=self._routes_of)
        self._closed = False
        self._active: set[GuestRun] = set()  # runs in progress: close() cancels them
        self._ticker = EpochTicker(self.engine, self._active)
        self._idle = threading.Condition(self._lock)
        # Now, while descriptors are to be had: made at the first guest write
        # instead, without them, wasmtime aborts the process (wasi_runtime.py).
        wasi_runtime.prime()

    # ---- modules -----------------------------------------------------------

    def load(self, module: str | os.PathLike[str] | bytes | LoadedModule,
             name: str | None = None) -> LoadedModule:
        if isinstance(module, LoadedModule):
            if module.engine is self.engine:
                return module
            # A handle from another Host: its code is reusable, its engine is not.
            digest, label = module.sha256, name or module.name
            cached = self.modules.get(digest)
            if cached is not None:
                return cached
            compiled, code_bytes = carry_over(self.engine, module)
            return self._register(label, digest, compiled, False, code_bytes)
        if isinstance(module, bytes):
            wasm, label = module, name or "module.wasm"
        else:
            path = Path(module)
            try:
                wasm = path.read_bytes()
            except OSError as exc:
                raise ModuleLoadError(f"cannot read {path}: {exc.strerror}") from exc
            label = name or path.name
        digest = hashlib.sha256(wasm).hexdigest()
        cached = self.modules.get(digest)
        if cached is not None:
            return cached if cached.name == label else LoadedModule(
                label, digest, cached.module, cached.pre, self.engine, cached.from_disk_cache)
        compiled, from_disk, code_bytes = compile_module(
            self.engine, wasm, digest, self.config.cache_dir)
        return self._register(label, digest, compiled, from_disk, code_bytes)

    def _register(self, label: str, digest: str, compiled: wasmtime.Module,
                  from_disk: bool, code_bytes: int) -> LoadedModule:
        pre = link(self._linker, compiled)
        loaded = LoadedModule(label, digest, compiled, pre, self.engine, from_disk)
        return self.modules.put(loaded, code_bytes)

    # ---- backends ----------------------------------------------------------

    def use_backend(self, backend: Backend, name: str | None = None) -> None:
        """Serve sessions from a ready-made backend object: anything with the
        `Backend` protocol (`name`, `default_model`, `complete`, `close`), e.g.
        an in-process model. `name=None` replaces the default backend; a name
        adds one that guests pick with the `backend` param. The host closes it."""
        key = self._catalog.resolve("") if name is None else name
        assert key is not None  # the catalog always has a default
        with self._backend_lock:
            previous = self._backends.get(key)
            self._backends[key] = backend
            if name is not None:
                self._own_names.add(name)
        if previous is not None and previous is not backend:
            previous.close()

    def backend_for(self, name: object, model: object = None,
                    session: object = None) -> tuple[Backend | None, str | None]:
        """The backend a session asked for (None = the default), or an error text.
        When the host routes, one that routes each completion of the send
        (`model`: the guest's model param; `session`: whose history it reads)."""
        if self._router is not None:
            return self._router.session_backend(name, model, session)
        return self._named_backend(name)

    def _named_backend(self, name: object) -> tuple[Backend | None, str | None]:
        catalog = self._catalog
        requested = name if isinstance(name, str) else ""
        with self._backend_lock:
            if requested in self._own_names:
                return self._backends[requested], None
        key = catalog.resolve(requested)
        if key is None:
            return None, catalog.unknown(str(name))
        with self._backend_lock:
            backend = self._backends.get(key)
            if backend is None:
                try:
                    backend = catalog.build(key)
                except ConfigError as exc:  # e.g. a scripted backend's script is unreadable
                    return None, f"backend {key!r} cannot start: {exc}"
                self._backends[key] = backend
        return backend, None

    def key_envs(self) -> list[str]:
        """Names of every env var that holds an API key this host may send
        (an embedder's own backend object counts when it names its variable)."""
        with self._backend_lock:
            own = {getattr(b, "api_key_env", "") for b in self._backends.values()}
        names = {self.config.api_key_env, *self._catalog.key_envs(), *own}
        return sorted(n for n in names if n and isinstance(n, str))

    def replay_mismatch(self) -> str | None:
        """Where a replayed run first diverged from its cassette (None: it did not)."""
        return self._catalog.replay_mismatch()

    # ---- runs --------------------------------------------------------------

    def run(
        self,
        module: str | os.PathLike[str] | bytes | LoadedModule,
        argv: list[str] | tuple[str, ...] = (),
        *,
        env: Mapping[str, str | None] | None = None,
        inherit_env: bool = False,
        stdin: bytes | str | None = None,
        dirs: list[tuple[str, str]] | None = None,
        invoke: str | None = None,
        capture_output: bool = True,
        on_event: EventSink | None = None,
        collect_events: bool = False,
        cancel: threading.Event | None = None,
        limits: dict[str, Any] | None = None,
        on_guest_log: GuestLogSink | None = None,
        task_params: Mapping[str, Any] | None = None,
        send_hook: SendHook | None = None,
        streams: StreamHub | None = None,
        journal: JournalSpec | None = None,
    ) -> RunResult:
        """Run one guest. `limits` overrides the host's guest limits for this
        run only: timeout, tool_timeout, fuel, max_memory, max_open_fds,
        max_log_bytes, max_host_bytes, max_parallel_tools (validated like
        HostConfig; unknown keys are a ValueError). `on_guest_log(level, text)`
        receives the guest's `log` calls instead of stderr (e.g. to keep a
        JSON log stream JSON).
        `task_params` adds SPEAR task-layer keys (`mcp.enabled`, ...) to the
        host's for this run (a bad one is a ValueError naming it).
        `send_hook(run, session, flags)` may answer a cchat_send itself
        (RunOptions.send_hook; `spearpy mcp serve` uses it).
        `streams` lets clients reach the guest's user streams (a StreamHub
        that serves this run only; `Host.start(..., streams=True)` makes one
        and its handle opens streams: docs/streams.md).
        `journal` journals the run, resumes it, replays or forks it
        (docs/durable.md).

        `env` sets guest variables; a None value passes that variable through
        from this process's environment (`--env NAME`), the only way to give
        the guest one that `inherit_env` withholds as a credential
        (spearpy.secret_env). A backend's key variable is refused even then:
        SecretEnvError (a ValueError) naming it."""
        if self._closed:
            raise RuntimeError("this Host is closed")
        _check_run_inputs(argv, env, dirs)
        # Refused here, naming the variable, rather than as a failed run.
        passed_through(os.environ, [k for k, v in (env or {}).items() if v is None],
                       self.key_envs())
        loaded = self.load(module)
        collected: list[Event] = []
        sinks: list[EventSink] = []
        if on_event is not None:
            sinks.append(on_event)
        if collect_events:
            sinks.append(collected.append)
        options = RunOptions(
            argv=list(argv), env=dict(env) if env else None, inherit_env=inherit_env,
            stdin=stdin.encode() if isinstance(stdin, str) else stdin, dirs=list(dirs or []),
            invoke=invoke, capture_output=capture_output, sinks=sinks, cancel=cancel,
            limits=dict(limits) if limits else None, guest_log=on_guest_log,
            task=self.task_policy if not task_params else
            task_policy({**self._task_params, **task_params}),
            send_hook=send_hook, streams=streams,
        )
        run = GuestRun(self.engine, self.config, loaded, options, self.services)
        if journal is not None:
            from spearpy.durable import bind_journal

            secrets = [value for name in self.key_envs() if (value := os.environ.get(name))]
            path = module if isinstance(module, str | os.PathLike) else None
            try:
                diverged = bind_journal(run, journal, self.config, loaded.sha256, path, secrets)
            finally:
                if run.journal is None and streams is not None:
                    streams.unbind()  # bound as the run was built; it never starts
            if diverged is not None:
                return diverged
        with self.in_progress(run):
            result = run.execute()
        if collect_events:
            return _with_events(result, collected)
        return result

    def resume(self, journal: JournalSpec, *,
               module: str | os.PathLike[str] | bytes | LoadedModule | None = None,
               stdin: bytes | None = None, **kwargs: Any) -> RunResult:
        """Go on with the journaled run `journal` names: started again as its
        journal records (argv, the environment's names, stdin, dirs, invoke;
        `module` when its file moved or it was given bytes, `stdin` when the
        journal keeps only a digest), answered from the journal, then live on
        this Host. The Host must have the journaled run's flags (else
        replay_mismatch at step 0). `kwargs` go to `run` (on_event, cancel...;
        `limits` over the journaled run's own).
        The journal's mounts and variables are taken as recorded: for a
        journal you did not write, check `spearpy.durable.journal_grants`
        first (docs/durable.md, "Whose journal")."""
        from spearpy.durable import read_start, run_arguments
        from spearpy.journal import JournalError
        from spearpy.journal.errors import said

        arguments = run_arguments(read_start(journal), module=module, stdin=stdin)
        # The caller's limits over the journaled run's own.
        arguments["limits"] = {**(arguments["limits"] or {}),
                               **(kwargs.pop("limits", None) or {})} or None
        try:
            _check_run_inputs(arguments["argv"], arguments["env"], arguments["dirs"])
            run_config(self.config, arguments["limits"])
        except (TypeError, ValueError) as exc:
            # The journal's inputs (a mount gone since, a hand-edited start):
            # bad input from a file, not a caller's mistake.
            raise JournalError(f"the journaled run cannot start here: {said(exc)}") from None
        return self.run(**arguments, journal=journal, **kwargs)

    @contextlib.contextmanager
    def in_progress(self, run: GuestRun) -> Iterator[None]:
        """While `run` executes guest code: close() cancels and waits for it,
        and the epoch ticker (which sleeps with no run in progress) moves, so
        its deadlines and cancels reach running wasm."""
        with self._lock:
            if self._closed:
                raise RuntimeError("this Host is closed")
            self._active.add(run)
            self._ticker.resume()
        try:
            yield
        finally:
            with self._lock:
                self._active.discard(run)
                self._idle.notify_all()
                if self._closed and not self._active:
                    self._ticker.stop()  # close() left it running for this run

    def start(self, module: str | os.PathLike[str] | bytes | LoadedModule,
              argv: list[str] | tuple[str, ...] = (), **kwargs: Any) -> RunHandle:
        """`run` on a thread of its own; the handle's `cancel()` stops it from
        any thread and `result()` waits for its RunResult."""
        return start_run(self, module, argv, **kwargs)

    async def run_async(self, module: str | os.PathLike[str] | bytes | LoadedModule,
                        argv: list[str] | tuple[str, ...] = (), **kwargs: Any) -> RunResult:
        """`run` without blocking the event loop. A thread per run, not
        asyncio's default executor (min(32, cores + 4) threads): runs mostly
        wait on the model and must not queue behind each other. Cancelling
        the awaiting task cancels the guest."""
        return await self.start(module, argv, **kwargs).wait()

    def _routes_of(self, session: ChatSession) -> list[dict[str, Any]]:
        return self._router.records(session) if self._router is not None else []

    def close(self, grace: float = CLOSE_GRACE_S) -> None:
        """Cancel the runs still in progress, give them `grace` seconds to end,
        then close the backends. The epoch ticker is what stops running wasm,
        so it keeps going until the last run has ended: stopping it first left
        a spinning guest beyond any deadline or cancel."""
        with self._lock:
            self._closed = True
            for run in self._active:
                run.interrupts.cancel("cancelled", "the Host was closed during the run")
            self._idle.wait_for(lambda: not self._active, timeout=grace)
            if not self._active:
                self._ticker.stop()
        with self._backend_lock:
            for backend in self._backends.values():
                backend.close()
            self._backends.clear()
        self.tools.close()

    def __enter__(self) -> Host:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()


def _config_file_tables(config: HostConfig) -> tuple[list[Path], list[Any], dict[str, Any]]:
    """(MCP record dirs, inline MCP records, task keys) of the config file
    (and SMS_MCP_DIR, with or without one)."""
    file = read_config_file(config.config_file)
    if file.path is None and not os.environ.get("SMS_MCP_DIR"):
        return [], [], {}  # the MCP config reader loads only for a file or SMS_MCP_DIR
    from spearpy.mcp.config_tables import mcp_tables

    dirs, servers = mcp_tables(file)
    return dirs, servers, file.table("task")


def _with_events(result: RunResult, events: list[Event]) -> RunResult:
    from dataclasses import replace

    return replace(result, events=events)


def _check_run_inputs(argv: list[str] | tuple[str, ...],
                      env: Mapping[str, str | None] | None,
                      dirs: list[tuple[str, str]] | None) -> None:
    """Say which argument is wrong before the run starts. WASI passes argv and
    env as C strings (wasmtime-py would fail deep inside with an
    AttributeError), and a missing preopen directory would end the run as a
    trap that only says "failed to add preopen dir"."""
    for host_path, _guest_path in dirs or ():
        if not os.path.isdir(host_path):
            raise ValueError(f"dirs: {host_path!r} is not a directory")
    pairs = [("argv", repr(arg), arg) for arg in argv]
    pairs += [("env", f"{key!r}: {value!r}", item) for key, value in (env or {}).items()
              for item in (key, value) if item is not None]  # None: pass through
    for where, shown, item in pairs:
        if not isinstance(item, str):
            raise TypeError(f"{where} entries must be str: {shown}")
        if "\0" in item:
            raise ValueError(f"{where} entries cannot contain NUL: {shown}")
    for key in env or {}:
        if not key or "=" in key:
            raise ValueError(f"env names must be non-empty and without '=': {key!r}")
