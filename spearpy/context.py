"""What one run is to the code below the Host: `RunContext`.

Hostcalls, the driver and tool sources see a run only through this object:
its fd table, guest memory, interrupts and waker, events, budgets and
options, and `RunServices`, the few things of the Host a run needs (backend
resolution, the host's tool sources, the limit policy, the names of the key
variables), built by the Host once per run. Nothing here holds or reaches the
Host, so hostcalls and the driver run on a context built in a test without a
Host or wasmtime (spearpy.testing.fake_context). `instance.GuestRun` is the
context of a run that executes a wasm module: it adds the Store, WASI and the
guest's function table.
"""

from __future__ import annotations

import sys
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from spearpy import abi
from spearpy.capture import Capture
from spearpy.config import HostConfig
from spearpy.fds import ChatSessionFd, FdTable
from spearpy.interrupts import Interrupts
from spearpy.logring import LogRing
from spearpy.memory import GuestMemory
from spearpy.observe.events import AUDIO_CLOSE, SESSION_CLOSE, EventBus, EventSink
from spearpy.outcome import Outcome

if TYPE_CHECKING:
    from spearpy._native import RawFunc
    from spearpy.backends.base import Backend
    from spearpy.chat.params import LimitPolicy
    from spearpy.chat.session import ChatSession
    from spearpy.durable.run_journal import RunJournal
    from spearpy.fds import ChatResponse
    from spearpy.fds.base import Fd
    from spearpy.mcp.policy import TaskPolicy
    from spearpy.streams.hub import StreamHub
    from spearpy.tools.sources import HostTools

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

GuestLogSink = Callable[[str, str], None]
SendHook = Callable[["RunContext", "ChatSession", int], "ChatResponse | None"]
S = TypeVar("S")


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
                        "max_log_bytes", "max_host_bytes", "max_parallel_tools"})


def run_config(config: HostConfig, limits: dict[str, Any] | None) -> HostConfig:
    """The host configuration with one run's limit overrides, validated like
    the host's own (a negative timeout is refused, not silently used)."""
    if not limits:
        return config
    unknown = sorted(set(limits) - RUN_LIMITS)
    if unknown:
        raise ValueError(f"unknown run limits {unknown}; known: {sorted(RUN_LIMITS)}")
    return HostConfig.model_validate({**config.model_dump(), **limits})


BackendResolver = Callable[[object, object, object], "tuple[Backend | None, str | None]"]


@dataclass(frozen=True, slots=True)
class RunServices:
    """What a run uses of its Host, handed down instead of the Host."""

    # (backend param, model param, session) -> the backend, or an error text
    backend_for: BackendResolver
    # The host's tool sources (Python functions, MCP servers), attached per send
    tools: HostTools
    limit_policy: LimitPolicy
    # Names of the variables holding keys the host may send (asked when
    # needed: an embedder may add a backend while a run is in progress)
    key_envs: Callable[[], list[str]]
    # A session's routing records, for its transcript ([] without routing)
    routes_of: Callable[[ChatSession], list[dict[str, Any]]] = lambda _session: []


class RunContext:
    """Everything one run owns below the Host. Used by one thread at a time;
    other threads only reach `interrupts` (cancel) and fds' wakers."""

    def __init__(self, config: HostConfig, options: RunOptions, services: RunServices,
                 memory: GuestMemory | None = None) -> None:
        self.config = run_config(config, options.limits)
        self.options = options
        self.services = services
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
        self.memory = memory if memory is not None else GuestMemory(None, None)
        self.logs = LogRing()  # the guest's last log lines (RunResult.logs)
        # The run's journal (docs/durable.md); None: nothing is journaled.
        self.journal: RunJournal | None = None
        self.allocator: tuple[RawFunc, RawFunc] | None = None
        self.tool_funcs: dict[int, RawFunc | None] = {}  # tool_function's, read-only
        self._log_bytes = 0
        self._host_bugs = 0
        self._sending: list[int] = []  # session fds whose send is in progress, outermost first
        # Per-run state of hostcall families (the audio budget...), by factory.
        self._family_state: dict[Callable[[RunContext], Any], Any] = {}
        self._state_lock = threading.Lock()

    # ---- per-run state of hostcall families ------------------------------

    def state(self, factory: Callable[[RunContext], S]) -> S:
        """The run's object made by `factory`, made on first use (a run that
        never opens an audio fd never has an audio budget). Thread-safe: a
        worker thread of an fd may ask for it."""
        found = self._family_state.get(factory)
        if found is None:
            with self._state_lock:
                found = self._family_state.get(factory)
                if found is None:
                    found = self._family_state[factory] = factory(self)
        made: S = found
        return made

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

    def keep_log(self, level: str, text: str) -> None:
        """Keep a guest log line in the run's ring; what the ring holds is charged."""
        grown = self.logs.add(level, text)
        if grown >= 0:
            self.charge(grown, "the guest's log lines")
        else:
            self.release(-grown)

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

    def tool_function(self, index: int) -> RawFunc | None:
        """The guest function at `index` of its table, if it has a tool's
        signature; a context without a wasm guest has none."""
        return None

    # ---- fds and sessions --------------------------------------------------

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

    def transcript_of(self, session: ChatSession) -> dict[str, Any]:
        routes = self.services.routes_of(session)
        return {
            "run_id": self.run_id,
            "session_fd": session.fd,
            "closed_at": time.time(),
            "params": dict(session.params),
            "tools": session.registry.specs() or [],
            "messages": list(session.messages),
            **({"routes": routes} if routes else {}),
        }

    def session_closed(self, session: ChatSession, *, ending: bool = False) -> None:
        """Keep a closed session's transcript (to the run's end: the result
        holds it) and say so in a session_close event. What it keeps beyond
        the session's charged contents is charged; past max_host_bytes the
        run ends, unless it is `ending` already (the host closing what is left)."""
        transcript = self.transcript_of(session)
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


__all__ = ["RUN_LIMITS", "GuestLogSink", "RunContext", "RunOptions", "RunServices",
           "SendHook", "run_config"]
