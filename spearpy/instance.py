"""One guest run: its Store, WASI context, fd table, deadlines and outcome."""

from __future__ import annotations

import os
import sys
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import wasmtime

from spearpy import _native, abi
from spearpy.capture import Capture, StreamCapture
from spearpy.config import HostConfig
from spearpy.endings import (
    MAX_MEMORIES,
    MAX_TABLE_ELEMENTS,
    MAX_TABLES,
    classify_error,
    classify_trap,
)
from spearpy.fds import ChatSessionFd, FdTable
from spearpy.interrupts import Interrupts
from spearpy.memory import GuestMemory
from spearpy.observe.events import (
    AUDIO_CLOSE,
    RUN_END,
    RUN_START,
    SESSION_CLOSE,
    EventBus,
    EventSink,
)
from spearpy.outcome import Outcome, RunResult, exit_code_for
from spearpy.scratch import scratch_dir
from spearpy.secret_env import guest_env

if TYPE_CHECKING:
    from spearpy.chat.session import ChatSession
    from spearpy.fds import ChatResponse
    from spearpy.fds.base import Fd
    from spearpy.host import Host, LoadedModule
    from spearpy.mcp.policy import TaskPolicy
    from spearpy.streams.hub import StreamHub

_TOOL_SIGNATURE = ([wasmtime.ValType.i32()] * 4, [wasmtime.ValType.i32()])
_UNLIMITED_FUEL = (1 << 63) - 1
# A guest repeating a host bug must not flood the log with tracebacks.
MAX_LOGGED_HOST_BUGS = 10
# A device's last error in its audio_close event: a server's message can be long.
_MAX_ERROR_CHARS = 512
# What a closed session's transcript keeps beyond the messages, tools and
# params already charged (the dict, its lists and copies; tracemalloc), and
# one routing record in it: kept to the run's end, so a guest churning empty
# sessions pays for each.
TRANSCRIPT_BYTES = 1600
ROUTE_RECORD_BYTES = 1024
# One entry of tool_function's cache (the RawFunc, or None, and its slot).
TOOL_FUNC_BYTES = 256


GuestLogSink = Callable[[str, str], None]
SendHook = Callable[["GuestRun", "ChatSession", int], "ChatResponse | None"]


@dataclass(slots=True)
class RunOptions:
    argv: list[str] = field(default_factory=list)
    env: dict[str, str | None] | None = None  # None value: pass through from os.environ
    inherit_env: bool = False
    stdin: bytes | None = None
    dirs: list[tuple[str, str]] = field(default_factory=list)  # (host path, guest path)
    invoke: str | None = None
    capture_output: bool = False
    sinks: list[EventSink] = field(default_factory=list)
    cancel: threading.Event | None = None
    # Per-run overrides of the host's guest limits (RUN_LIMITS keys).
    limits: dict[str, Any] | None = None
    # Receives (level, text) of each guest `log` call instead of stderr.
    guest_log: GuestLogSink | None = None
    # The run's MCP task layer (None: MCP is off for this run).
    task: TaskPolicy | None = None
    # Called by cchat_send before anything goes upstream; a response it
    # returns is the send's (`spearpy mcp serve` serves the guest's tools
    # from inside its first send this way). None: the send goes on as usual.
    send_hook: SendHook | None = None
    # The run's user streams (Host.run(streams=...)); None: no client can
    # reach it, and user_stream_open / user_stream_ctl_open answer -ENOTCONN.
    streams: StreamHub | None = None


# The HostConfig fields one run may override (`Host.run(limits={...})`).
RUN_LIMITS = frozenset({"timeout", "tool_timeout", "fuel", "max_memory", "max_open_fds",
                        "max_log_bytes", "max_host_bytes"})


def run_config(config: HostConfig, limits: dict[str, Any] | None) -> HostConfig:
    """The host configuration with one run's limit overrides, validated like
    the host's own (a negative timeout is refused, not silently used)."""
    if not limits:
        return config
    unknown = sorted(set(limits) - RUN_LIMITS)
    if unknown:
        raise ValueError(f"unknown run limits {unknown}; known: {sorted(RUN_LIMITS)}")
    return HostConfig.model_validate({**config.model_dump(), **limits})


class GuestRun:
    """Everything one execution of a guest module owns. Used by one thread at
    a time; other threads only reach `interrupts` (cancel) and fds' wakers."""

    def __init__(self, host: Host, module: LoadedModule, options: RunOptions) -> None:
        self.host = host
        self.config = run_config(host.config, options.limits)
        self.module = module
        self.options = options
        self.run_id = uuid.uuid4().hex[:12]
        self.fds = FdTable(self.config.max_open_fds, self)
        self.events = EventBus(self.run_id, options.sinks)
        self.interrupts = Interrupts(timeout=self.config.timeout,
                                     tool_timeout=self.config.tool_timeout,
                                     cancel=options.cancel)
        self.started = time.monotonic()
        self.host_bytes = 0  # what the host keeps for this run (HostConfig.max_host_bytes)
        self.transcripts: list[dict[str, Any]] = []
        self.usage = {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}
        self.stdout = Capture() if options.capture_output else None
        self.stderr = Capture() if options.capture_output else None
        self.store = wasmtime.Store(host.engine)
        self.memory = GuestMemory(self.store, None)
        self.allocator: tuple[_native.RawFunc, _native.RawFunc] | None = None
        self._log_bytes = 0
        self._host_bugs = 0
        self._sending: list[int] = []  # session fds whose send is in progress, outermost first
        self.tool_funcs: dict[int, _native.RawFunc | None] = {}  # tool_function's, read-only
        self._streams: StreamCapture | None = None
        self._table: wasmtime.Table | None = None
        if options.streams is not None:
            options.streams.bind(self.interrupts.waker)  # clients' frames wake the guest

    # ---- sends in progress -----------------------------------------------

    def is_sending(self, fd: int) -> bool:
        """True while a send on this session runs (a tool inside it may not
        change the session under its own loop)."""
        return fd in self._sending

    @property
    def send_depth(self) -> int:
        return len(self._sending)

    def begin_send(self, fd: int) -> None:
        self._sending.append(fd)

    def end_send(self, fd: int) -> None:
        self._sending.remove(fd)

    def add_usage(self, usage: dict[str, int]) -> None:
        for key, value in usage.items():
            self.usage[key] = self.usage.get(key, 0) + value

    # ---- host-side budgets -----------------------------------------------

    def charge(self, nbytes: int, what: str) -> None:
        """Count bytes the host now keeps for this run; past max_host_bytes the
        run ends with memory_limit (noted, then raised as HostInterrupt)."""
        self.host_bytes += nbytes
        if self.host_bytes > self.config.max_host_bytes:
            self._over_budget(what)

    def release(self, nbytes: int) -> None:
        """Give back a charge whose object the host no longer keeps (a closed fd)."""
        self.host_bytes -= nbytes

    def reserve_bytes(self, nbytes: int, what: str) -> None:
        """Before reading or building something the host would keep: end the
        run with memory_limit now if `nbytes` more would pass max_host_bytes.
        Nothing is counted (`charge` does that once the thing is kept), so a
        call refused later for another reason costs the budget nothing."""
        if self.host_bytes + nbytes > self.config.max_host_bytes:
            self._over_budget(what)

    def fits(self, nbytes: int) -> bool:
        return self.host_bytes + nbytes <= self.config.max_host_bytes

    def _over_budget(self, what: str) -> None:
        self.interrupts.note(Outcome.MEMORY_LIMIT, (
            f"the guest made the host keep more than {self.config.max_host_bytes} bytes "
            f"for it (last: {what}; max_host_bytes)"))
        self.interrupts.raise_if_run_ends()

    def count_log(self, nbytes: int) -> bool:
        """Count guest log bytes; False once they pass max_log_bytes."""
        self._log_bytes += nbytes
        return self._log_bytes <= self.config.max_log_bytes

    def note_host_bug(self, where: str, exc: BaseException) -> None:
        # A guest that found a way to trigger one can repeat it: log the first
        # few with their traceback, not a flood.
        self._host_bugs += 1
        if self._host_bugs > MAX_LOGGED_HOST_BUGS:
            return
        # structlog (and rich through it) loads only when there is a line to log.
        from spearpy.observe.logger import get_logger

        get_logger("spearpy").error(
            "hostcall failed inside the host; the guest got EIO", hostcall=where,
            run_id=self.run_id, error=f"{type(exc).__name__}: {exc}", exc_info=exc)

    # ---- guest output ----------------------------------------------------

    def write_stderr(self, text: str) -> None:
        if self.stderr is not None:
            self.stderr.write(text.encode())
        else:
            sys.stderr.write(text)
            sys.stderr.flush()

    # ---- tools -----------------------------------------------------------

    def tool_function(self, index: int) -> _native.RawFunc | None:
        if index in self.tool_funcs:
            return self.tool_funcs[index]
        table = self._table
        if table is None or not 0 <= index < table.size(self.store):
            # Not cached: a guest asking for every i32 would grow the cache
            # by an entry per refused call.
            return None
        func = None
        try:
            item = table.get(self.store, index)
        except wasmtime.WasmtimeError:
            item = None
        if isinstance(item, wasmtime.Func):
            ty = item.type(self.store)
            if ([str(p) for p in ty.params], [str(r) for r in ty.results]) == (
                [str(p) for p in _TOOL_SIGNATURE[0]], [str(r) for r in _TOOL_SIGNATURE[1]]
            ):
                func = _native.RawFunc(self.store, item, 4, 1)
        # Kept to the run's end, one per table slot asked (up to
        # MAX_TABLE_ELEMENTS): charged like anything else the host keeps.
        self.tool_funcs[index] = func
        self.charge(TOOL_FUNC_BYTES, "a tool function lookup")
        return func

    # ---- lifecycle -------------------------------------------------------

    def _wasi(self, scratch: Path) -> wasmtime.WasiConfig:
        wasi = wasmtime.WasiConfig()
        wasi.argv = [self.module.name, *self.options.argv]
        # Inheriting passes no credential and never a backend's key: they
        # belong to the operator, and the guest is untrusted (secret_env).
        env = guest_env(os.environ, self.options.env, inherit=self.options.inherit_env,
                        extra_deny=self.host.key_envs())
        if env:
            wasi.env = list(env.items())
        if self.options.stdin is not None:
            path = scratch / "stdin"
            path.write_bytes(self.options.stdin)
            wasi.stdin_file = str(path)
        if self.stdout is not None:
            # Paths, not stdout_custom: wasmtime-py's custom-output callbacks
            # can abort the process at interpreter exit (a tokio worker
            # starting during shutdown panics across the FFI boundary).
            self._streams = StreamCapture(scratch)
            paths = self._streams.paths()
            wasi.stdout_file = str(paths["stdout"])
            wasi.stderr_file = str(paths["stderr"])
        else:
            wasi.inherit_stdout()
            wasi.inherit_stderr()
        for host_path, guest_path in self.options.dirs:
            wasi.preopen_dir(host_path, guest_path)
        return wasi

    def _bind_exports(self, instance: wasmtime.Instance) -> None:
        exports = instance.exports(self.store)
        memory = exports.get("memory")
        if isinstance(memory, wasmtime.Memory):
            self.memory = GuestMemory(self.store, memory)
        for name in ("__indirect_function_table", "table"):
            table = exports.get(name)
            if isinstance(table, wasmtime.Table):
                self._table = table
                break
        else:
            self._table = next((e for e in exports if isinstance(e, wasmtime.Table)), None)
        alloc, free = exports.get("spear_alloc"), exports.get("spear_free")
        if isinstance(alloc, wasmtime.Func) and isinstance(free, wasmtime.Func):
            self.allocator = (_native.RawFunc(self.store, alloc, 1, 1),
                              _native.RawFunc(self.store, free, 2, 0))

    def instantiate(self, scratch: Path) -> wasmtime.Instance:
        config = self.config
        self.store.set_limits(
            memory_size=config.max_memory if config.max_memory is not None else -1,
            table_elements=MAX_TABLE_ELEMENTS, tables=MAX_TABLES, memories=MAX_MEMORIES)
        self.store.set_fuel(config.fuel if config.fuel is not None else _UNLIMITED_FUEL)
        _native.watch_epochs(self.store)
        self.store.set_wasi(self._wasi(scratch))
        instance = self.module.pre.instantiate(self.store)
        self._bind_exports(instance)
        return instance

    def execute(self) -> RunResult:
        """Instantiate, call the entry export, and report how the run ended."""
        with scratch_dir(self.run_id) as scratch:
            try:
                outcome, message, exit_code = self._enter(scratch)
            finally:
                self._collect_output()
        return self._finish(outcome, message, exit_code)

    def _enter(self, scratch: Path) -> tuple[Outcome, str, int]:
        self.events.emit(RUN_START, module=self.module.name, sha256=self.module.sha256)
        previous = _native.enter_run(self)
        try:
            instance = self.instantiate(scratch)
            entry_name = self.options.invoke or "_start"
            entry = instance.exports(self.store).get(entry_name)
            if not isinstance(entry, wasmtime.Func):
                return (Outcome.LOAD_ERROR,
                        f"the module exports no function named {entry_name!r}", 0)
            returned = entry(self.store)
            if self.options.invoke and isinstance(returned, int):
                return Outcome.EXITED, "", returned & 0xFF
            return Outcome.EXITED, "", 0
        except wasmtime.ExitTrap as exc:
            return Outcome.EXITED, "", exc.code
        except wasmtime.Trap as exc:
            return (*classify_trap(exc.trap_code, exc.message, self.interrupts.noted,
                                   self.config, self.memory), 0)
        except wasmtime.WasmtimeError as exc:
            return (*classify_error(str(exc), self.interrupts.noted, self.config), 0)
        finally:
            _native.enter_run(previous)

    def _collect_output(self) -> None:
        streams, self._streams = self._streams, None
        if streams is None:
            return
        guest = streams.finish()
        for capture, name in ((self.stdout, "stdout"), (self.stderr, "stderr")):
            if capture is not None:
                # Host log lines were captured as they came; the guest's own
                # stream goes first.
                capture.data[:0] = guest[name].data
                capture.truncated = capture.truncated or guest[name].truncated

    def _finish(self, outcome: Outcome, message: str, exit_code: int) -> RunResult:
        self.close_all_sessions()
        if self.options.streams is not None:
            from spearpy.hostcalls.streams import end_streams

            end_streams(self)
        # Fds fed from other threads (mic sources, rtasr connections) stop their
        # workers when closed: none may outlive the run.
        for fd, _entry in self.fds.entries():
            self.close_fd(fd, "run_end")
        code = exit_code if outcome is Outcome.EXITED else exit_code_for(outcome)
        elapsed = (time.monotonic() - self.started) * 1000.0
        self.events.emit(RUN_END, outcome=outcome, exit_code=code, elapsed_ms=round(elapsed, 3))
        return RunResult(
            run_id=self.run_id, exit_code=code, outcome=outcome, message=message,
            stdout=bytes(self.stdout.data) if self.stdout is not None else None,
            stderr=bytes(self.stderr.data) if self.stderr is not None else None,
            usage=dict(self.usage), transcripts=list(self.transcripts), elapsed_ms=elapsed,
        )

    def close_fd(self, fd: int, reason: str, kind: type[Fd] | None = None) -> int:
        """Close one fd of the table (-EBADF if it is not of `kind`); a device
        fd says how it ended in an `audio_close` event (its last error would
        otherwise go unseen)."""
        entry = self.fds.lookup(fd)
        if kind is not None and entry is not None and not isinstance(entry, kind):
            return abi.EBADF
        rc = self.fds.close(fd)
        summary = entry.close_summary() if entry is not None and rc == 0 else None
        if summary is not None:
            error = summary.get("last_error")
            if isinstance(error, str) and len(error) > _MAX_ERROR_CHARS:
                summary["last_error"] = error[:_MAX_ERROR_CHARS] + "..."
            self.events.emit(AUDIO_CLOSE, fd, reason=reason, **summary)
        return rc

    def session_closed(self, session: ChatSession, *, ending: bool = False) -> None:
        """Keep a closed session's transcript (to the run's end: the result
        holds it) and say so in a session_close event. What it keeps beyond
        the session's charged contents is charged; past max_host_bytes the
        run ends, unless it is `ending` already (the host closing what is left)."""
        transcript = self.host.transcript_of(self, session)
        self.transcripts.append(transcript)
        # The transcript rides in `content`, which event files leave out.
        self.events.emit(SESSION_CLOSE, session.fd, messages=len(transcript["messages"]),
                         content={"transcript": transcript})
        cost = TRANSCRIPT_BYTES + ROUTE_RECORD_BYTES * len(transcript.get("routes", ()))
        if ending:
            self.host_bytes += cost  # counted, but there is nothing left to stop
        else:
            self.charge(cost, "a closed session's transcript")

    def close_all_sessions(self) -> None:
        for fd, entry in self.fds.entries():
            if isinstance(entry, ChatSessionFd):
                self.fds.close(fd)
                self.session_closed(entry.session, ending=True)
