"""One guest run: its Store, WASI context, fd table, deadlines and outcome."""

from __future__ import annotations

import os
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import wasmtime

from spearpy import _native
from spearpy.capture import Capture, StreamCapture
from spearpy.config import HostConfig
from spearpy.endings import (
    MAX_MEMORIES,
    MAX_TABLE_ELEMENTS,
    MAX_TABLES,
    classify_error,
    classify_trap,
)
from spearpy.fds import ChatSessionFd, FdTable, Waker
from spearpy.memory import GuestMemory
from spearpy.observe.events import RUN_END, RUN_START, SESSION_CLOSE, EventBus, EventSink
from spearpy.outcome import RunResult, exit_code_for
from spearpy.secret_env import guest_env

if TYPE_CHECKING:
    from spearpy.chat.session import ChatSession
    from spearpy.fds import ChatResponse
    from spearpy.host import Host, LoadedModule
    from spearpy.mcp.policy import TaskPolicy

_TOOL_SIGNATURE = ([wasmtime.ValType.i32()] * 4, [wasmtime.ValType.i32()])
_UNLIMITED_FUEL = (1 << 63) - 1
# A guest repeating a host bug must not flood the log with tracebacks.
MAX_LOGGED_HOST_BUGS = 10


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
    """Everything one execution of a guest module owns. Used by one thread at a time."""

    def __init__(self, host: Host, module: LoadedModule, options: RunOptions) -> None:
        self.host = host
        self.config = run_config(host.config, options.limits)
        self.module = module
        self.options = options
        self.run_id = uuid.uuid4().hex[:12]
        self.fds = FdTable(self.config.max_open_fds)
        self.events = EventBus(self.run_id, options.sinks)
        self.cancel_event = options.cancel or threading.Event()
        # What the run's waits block on; the Host's ticker wakes it on cancel.
        self.waker = Waker()
        self.started = time.monotonic()
        self.deadline = self.started + self.config.timeout if self.config.timeout else None
        self.tool_deadline: float | None = None
        self.interrupt: tuple[str, str] | None = None
        self._tool_timeout: str | None = None
        self.log_bytes = 0
        self.host_bytes = 0  # see HostConfig.max_host_bytes
        self.host_bugs = 0
        self.sending: set[int] = set()  # session fds whose send is in progress
        self.transcripts: list[dict[str, Any]] = []
        self.usage = {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}
        self._tool_funcs: dict[int, _native.RawFunc | None] = {}
        self.stdout = Capture() if options.capture_output else None
        self.stderr = Capture() if options.capture_output else None
        self._streams: StreamCapture | None = None
        self.store = wasmtime.Store(host.engine)
        self.memory = GuestMemory(self.store, None)
        self.allocator: tuple[_native.RawFunc, _native.RawFunc] | None = None
        self._table: wasmtime.Table | None = None

    # ---- interruption ----------------------------------------------------

    def interrupt_reason(self) -> tuple[str, str] | None:
        if self.interrupt is not None:
            return self.interrupt
        if self.cancel_event.is_set():
            return ("cancelled", "the run was cancelled")
        now = time.monotonic()
        if self.deadline is not None and now >= self.deadline:
            return ("timeout", f"the run exceeded its {_seconds(self.config.timeout)}deadline")
        if self.tool_deadline is not None and now >= self.tool_deadline:
            return ("tool_timeout",
                    f"the tool exceeded its {_seconds(self.config.tool_timeout)}deadline")
        return None

    def run_interrupt(self) -> tuple[str, str] | None:
        """Like interrupt_reason, but only reasons that end the whole run."""
        reason = self.interrupt_reason()
        return None if reason is None or reason[0] == "tool_timeout" else reason

    def note_interrupt(self, outcome: str, message: str) -> None:
        if outcome == "tool_timeout":
            self._tool_timeout = message
        elif self.interrupt is None:
            self.interrupt = (outcome, message)

    def take_tool_timeout(self) -> str | None:
        reason, self._tool_timeout = self._tool_timeout, None
        return reason

    def check_interrupt(self) -> None:
        reason = self.run_interrupt()
        if reason is not None:
            raise _native.HostInterrupt(*reason)

    def charge(self, nbytes: int, what: str) -> None:
        """Count bytes the host now keeps for this run; past max_host_bytes the
        run ends with memory_limit (noted, then raised as HostInterrupt)."""
        self.host_bytes += nbytes
        if self.host_bytes > self.config.max_host_bytes:
            self._over_budget(what)

    def reserve_bytes(self, nbytes: int, what: str) -> None:
        """Before reading or building something the host would keep: end the
        run with memory_limit now if `nbytes` more would pass max_host_bytes.
        Nothing is counted (`charge` does that once the thing is kept), so a
        call refused later for another reason costs the budget nothing."""
        if self.host_bytes + nbytes > self.config.max_host_bytes:
            self._over_budget(what)

    def _over_budget(self, what: str) -> None:
        self.note_interrupt("memory_limit", (
            f"the guest made the host keep more than {self.config.max_host_bytes} bytes "
            f"for it (last: {what}; max_host_bytes)"))
        self.check_interrupt()

    def _check_any_interrupt(self) -> None:
        reason = self.interrupt_reason()
        if reason is not None:
            raise _native.HostInterrupt(*reason)

    def wait(self, seconds: float) -> None:
        """Sleep for the guest (see block_until)."""
        self.block_until(_never, seconds)

    def block_until(self, done: Callable[[], bool], seconds: float | None) -> None:
        """Wait on the run's waker until `done()`, for at most `seconds` (None:
        no limit of its own), never past the run deadline nor (inside a tool)
        the tool's; a cancel or a deadline ends the guest (HostInterrupt)."""
        end = None if seconds is None else time.monotonic() + max(0.0, seconds)
        for limit in (self.deadline, self.tool_deadline):
            if limit is not None and (end is None or end > limit):
                end = limit
        self._check_any_interrupt()
        self.waker.wait_until(lambda: done() or self.interrupt_reason() is not None, end)
        self._check_any_interrupt()

    def cancel(self, outcome: str, message: str) -> None:
        """End the run from another thread: noted, and every wait wakes."""
        self.note_interrupt(outcome, message)
        self.cancel_event.set()
        self.waker.wake()

    def effective_deadline(self) -> float | None:
        """The earliest deadline in force now: the run's, or inside a tool its own."""
        limits = [d for d in (self.deadline, self.tool_deadline) if d is not None]
        return min(limits) if limits else None

    def note_host_bug(self, where: str, exc: BaseException) -> None:
        # A guest that found a way to trigger one can repeat it: log the first
        # few with their traceback, not a flood.
        self.host_bugs += 1
        if self.host_bugs > MAX_LOGGED_HOST_BUGS:
            return
        # structlog (and rich through it) loads only when there is a line to log.
        from spearpy.observe.logs import get_logger

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
        if index in self._tool_funcs:
            return self._tool_funcs[index]
        func = None
        if self._table is not None and 0 <= index < self._table.size(self.store):
            try:
                item = self._table.get(self.store, index)
            except wasmtime.WasmtimeError:
                item = None
            if isinstance(item, wasmtime.Func):
                ty = item.type(self.store)
                if ([str(p) for p in ty.params], [str(r) for r in ty.results]) == (
                    [str(p) for p in _TOOL_SIGNATURE[0]], [str(r) for r in _TOOL_SIGNATURE[1]]
                ):
                    func = _native.RawFunc(self.store, item, 4, 1)
        self._tool_funcs[index] = func
        return func

    def arm_tool_deadline(self) -> bool:
        """Start one tool call's deadline (guestcall.call_tool resets
        `tool_deadline` when this returned True). A nested call (a tool's own
        send running tools) keeps the outer one: False. A plain flag, not a
        context manager: this is on every tool call's path."""
        timeout = self.config.tool_timeout
        if timeout is None or self.tool_deadline is not None:
            return False
        self.tool_deadline = time.monotonic() + timeout
        return True

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
        with tempfile.TemporaryDirectory(prefix="spearpy-") as scratch:
            try:
                outcome, message, exit_code = self._enter(Path(scratch))
            finally:
                self._collect_output()
        return self._finish(outcome, message, exit_code)

    def _enter(self, scratch: Path) -> tuple[str, str, int]:
        self.events.emit(RUN_START, module=self.module.name, sha256=self.module.sha256)
        previous = _native.enter_run(self)
        try:
            instance = self.instantiate(scratch)
            entry_name = self.options.invoke or "_start"
            entry = instance.exports(self.store).get(entry_name)
            if not isinstance(entry, wasmtime.Func):
                return "load_error", f"the module exports no function named {entry_name!r}", 0
            returned = entry(self.store)
            if self.options.invoke and isinstance(returned, int):
                return "exited", "", returned & 0xFF
            return "exited", "", 0
        except wasmtime.ExitTrap as exc:
            return "exited", "", exc.code
        except wasmtime.Trap as exc:
            return (*classify_trap(exc.trap_code, exc.message, self.interrupt, self.config,
                                   self.memory), 0)
        except wasmtime.WasmtimeError as exc:
            return (*classify_error(str(exc), self.interrupt, self.config), 0)
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

    def _finish(self, outcome: str, message: str, exit_code: int) -> RunResult:
        self.close_all_sessions()
        code = exit_code if outcome == "exited" else exit_code_for(outcome)
        elapsed = (time.monotonic() - self.started) * 1000.0
        self.events.emit(RUN_END, outcome=outcome, exit_code=code, elapsed_ms=round(elapsed, 3))
        return RunResult(
            run_id=self.run_id, exit_code=code, outcome=outcome, message=message,
            stdout=bytes(self.stdout.data) if self.stdout is not None else None,
            stderr=bytes(self.stderr.data) if self.stderr is not None else None,
            usage=dict(self.usage), transcripts=list(self.transcripts), elapsed_ms=elapsed,
        )

    def session_closed(self, session: ChatSession) -> None:
        transcript = self.host.transcript_of(self, session)
        self.transcripts.append(transcript)
        # The transcript rides in `content`, which event files leave out.
        self.events.emit(SESSION_CLOSE, session.fd, messages=len(transcript["messages"]),
                         content={"transcript": transcript})

    def close_all_sessions(self) -> None:
        for fd, entry in self.fds.entries():
            if isinstance(entry, ChatSessionFd):
                self.session_closed(entry.session)
                self.fds.close(fd)


def _never() -> bool:
    return False


def _seconds(limit: float | None) -> str:
    # A deadline set without its configured limit (an embedder or a test
    # setting `deadline` directly) still gets a message, never a crash.
    return f"{limit:g} s " if limit is not None else ""
