"""The sync face of MCP for one Host: `McpManager`.

Thread-safe: any guest thread may list and call; every request runs on the
manager's single event-loop thread against one persistent session per server
(`connection.Connection`). A call never raises for a tool-level reason: it
returns an `McpOutcome` whose content is the `role=tool` message, an error in
SPEAR's shape when something failed, so the send always goes on.
"""

from __future__ import annotations

import asyncio
import threading
import time
import weakref
from collections.abc import Iterable, Mapping
from typing import Any

from spearpy.mcp import results as r
from spearpy.mcp.connection import Connection
from spearpy.mcp.loop_thread import BridgeCancelled, BridgeTimeout, LoopClosed, LoopThread
from spearpy.mcp.models import McpError, McpOutcome, Offered, ServerStatus, ToolSpec
from spearpy.mcp.policy import (
    Approval,
    SessionPolicy,
    TaskPolicy,
    approval_for,
    effective_servers,
    match_any,
    tool_denial,
)
from spearpy.mcp.registry import RecordSource, Registry, ServerEntry
from spearpy.observe.logger import get_logger

# The bridge's own deadline sits this far past the loop's: the loop times the
# call out cleanly first, the bridge only catches a loop that is stuck.
BRIDGE_GRACE_S = 2.0
# Distinct (task, session) policies whose offers are kept; past it the cache
# starts over (a guest changing its lists every send only loses the shortcut).
MAX_OFFERS_CACHED = 256


def _spec(server_id: str, tool: Any) -> ToolSpec:
    annotations = tool.annotations.model_dump(by_alias=True, exclude_none=True) \
        if tool.annotations is not None else None
    return ToolSpec(server_id, tool.name, tool.description or "", dict(tool.input_schema),
                    tool.output_schema, tool.title, annotations)


class McpManager:
    """MCP servers for one Host: `list_tools`, `call_tool`, `status`, `close`."""

    def __init__(self, servers: Registry | Iterable[RecordSource | ServerEntry] = (), *,
                 environ: Mapping[str, str] | None = None,
                 host_env: Mapping[str, str] | None = None) -> None:
        if isinstance(servers, Registry):
            self.registry = servers
        else:
            self.registry = Registry()
            for item in servers:
                self.registry.add_source(item, environ)
        self._host_env = dict(host_env) if host_env is not None else None
        self._loop = LoopThread()
        self._conns: dict[str, Connection] = {}  # changed on the loop thread only
        # server id -> (the connection's cached listing, its ToolSpecs): the same
        # listing gives the same spec objects, so a source can keep what it built.
        self._specs: dict[str, tuple[list[Any], list[ToolSpec]]] = {}
        # (task, session) -> (usable server ids, (server id, record, specs) the
        # offer was computed from, the offer): a warm send's offer is the same
        # object while none of those changed, so it costs a few identity checks.
        # The one cache of offers: each tool source keeps what it makes of
        # one in it (Offered.made, by source).
        self._offered: dict[tuple[TaskPolicy, SessionPolicy], tuple[
            tuple[str, ...], tuple[tuple[str, ServerEntry, list[ToolSpec]], ...],
            Offered]] = {}
        # Bumped whenever a server's specs are made from a new listing.
        self._listing_generation = 0
        self._offered_generation = 0
        self._closed = False
        self._log: Any = None
        # A manager dropped without close() (or alive at interpreter exit)
        # still ends its servers: the finalizer holds no reference to self.
        self._finalizer = weakref.finalize(self, _shutdown, self._loop, self._conns, 10.0)

    # -- plumbing ----------------------------------------------------------

    def _conn(self, server_id: str) -> Connection:
        conn = self._conns.get(server_id)
        if conn is None:
            if self._log is None:
                self._log = get_logger("spearpy.mcp")
            entry = self.registry.entries[server_id]
            conn = self._conns[server_id] = Connection(entry, self._log, self._host_env)
        return conn

    def _usable(self, server_id: str) -> ServerEntry:
        if self._closed:
            raise McpError(r.MCP_SERVER_UNAVAILABLE, "the MCP manager is closed")
        entry = self.registry.get(server_id)
        if entry is None:
            raise McpError(r.MCP_UNKNOWN_SERVER, f"no MCP server {server_id!r} in the registry")
        if entry.disabled_reason is not None:
            raise McpError(r.MCP_SERVER_UNAVAILABLE,
                           f"server {server_id!r} is disabled: {entry.disabled_reason}")
        return entry

    def _run(self, coro: Any, deadline: float, cancel: threading.Event | None) -> Any:
        try:
            return self._loop.run(coro, deadline=deadline + BRIDGE_GRACE_S, cancel=cancel)
        except BridgeTimeout:
            raise McpError(r.MCP_TIMEOUT, "the MCP loop did not answer in time") from None
        except BridgeCancelled:
            raise McpError(r.MCP_CANCELLED, "cancelled") from None
        except LoopClosed:
            raise McpError(r.MCP_SERVER_UNAVAILABLE, "the MCP manager is closed") from None

    # -- tools -------------------------------------------------------------

    def server_ids(self) -> tuple[str, ...]:
        """The ids of the usable (not disabled) servers."""
        return self.registry.enabled_ids()

    def list_tools(self, server_id: str, *, deadline: float | None = None,
                   cancel: threading.Event | None = None) -> list[ToolSpec]:
        """The server's tools that its `allowed_tools` expose (cached until the
        server says they changed, or restarts). Raises McpError."""
        found, failed = self.collect_tools([server_id], deadline=deadline, cancel=cancel)
        if server_id in failed:
            raise failed[server_id]
        return found[server_id]

    def collect_tools(self, server_ids: Iterable[str], *, deadline: float | None = None,
                      cancel: threading.Event | None = None,
                      ) -> tuple[dict[str, list[ToolSpec]], dict[str, McpError]]:
        """List several servers concurrently: (tools by server, failure by server).
        One server failing removes only its tools."""
        found: dict[str, list[ToolSpec]] = {}
        failed: dict[str, McpError] = {}
        ends: dict[str, float] = {}
        now = time.monotonic()
        for sid in dict.fromkeys(server_ids):
            try:
                entry = self._usable(sid)
            except McpError as exc:
                failed[sid] = exc
                continue
            end = now + entry.record.budgets.effective_list_timeout_ms / 1000
            ends[sid] = end if deadline is None else min(end, deadline)
        if not ends:
            return found, failed
        warm = self._warm(ends)
        if warm is not None:
            return {**found, **warm}, failed

        async def one(sid: str) -> tuple[str, list[Any] | McpError]:
            try:
                return sid, await self._conn(sid).list_tools(ends[sid])
            except McpError as exc:
                return sid, exc

        async def every() -> list[tuple[str, list[Any] | McpError]]:
            return await asyncio.gather(*(one(sid) for sid in ends))

        try:
            listed = self._run(every(), max(ends.values()), cancel)
        except McpError as exc:
            return found, {**failed, **dict.fromkeys(ends, exc)}
        for sid, tools in listed:
            if isinstance(tools, McpError):
                failed[sid] = tools
                continue
            found[sid] = self._specs_of(sid, tools)
        return found, failed

    def _warm(self, server_ids: Iterable[str]) -> dict[str, list[ToolSpec]] | None:
        """Every server's listing from its live session's cache, without a trip
        to the loop thread; None when one needs the loop (not started, stale).
        Reading the cache from this thread is safe: the loop thread replaces
        the list, never changes it, and a listing one change old is what a
        send a moment earlier would have got."""
        found = {}
        for sid in server_ids:
            conn = self._conns.get(sid)
            tools = conn.cached_tools() if conn is not None else None
            if tools is None:
                return None
            found[sid] = self._specs_of(sid, tools)
        return found

    def _specs_of(self, server_id: str, tools: list[Any]) -> list[ToolSpec]:
        cached = self._specs.get(server_id)
        if cached is None or cached[0] is not tools:
            allowed = self.registry.entries[server_id].record.allowed_tools
            cached = self._specs[server_id] = (tools, [
                _spec(server_id, t) for t in tools if allowed and match_any(allowed, t.name)])
            self._listing_generation += 1
        return cached[1]

    def offered_tools(self, task: TaskPolicy, session: SessionPolicy, *,
                      deadline: float | None = None, cancel: threading.Event | None = None,
                      ) -> tuple[list[ToolSpec], dict[str, McpError]]:
        """The MCP tools one send offers under the three layers (registry and
        `allowed_tools`, task, session), and the servers that failed to list."""
        offered, failed = self.offer(task, session, deadline=deadline, cancel=cancel)
        return offered.specs, failed

    def offer(self, task: TaskPolicy, session: SessionPolicy, *,
              deadline: float | None = None, cancel: threading.Event | None = None,
              ) -> tuple[Offered, dict[str, McpError]]:
        """offered_tools' tools as the manager keeps them: the same Offered
        again while nothing it was made from changed (an offer some server
        failed to list for is made anew every time)."""
        available = self.server_ids()
        key = (task, session)
        hit = self._offered.get(key)
        if hit is not None and hit[0] == available and self._same_listings(hit[1]):
            return hit[2], {}
        servers = effective_servers(available, task, session)
        found, failed = self.collect_tools(servers, deadline=deadline, cancel=cancel)
        offered = Offered([spec for sid in servers for spec in found.get(sid, ())
                           if tool_denial(spec.name,
                                          self.registry.entries[sid].record.allowed_tools,
                                          task, session) is None])
        if not failed:
            listings = tuple((sid, self.registry.entries[sid], found[sid]) for sid in servers)
            if len(self._offered) >= MAX_OFFERS_CACHED \
                    or self._offered_generation != self._listing_generation:
                # Offers of an older listing would keep it alive (a hostile
                # server can change its listing at every send): start over.
                self._offered = {}
                self._offered_generation = self._listing_generation
            self._offered[key] = (available, listings, offered)
        return offered, failed

    def _same_listings(self, listings: tuple[tuple[str, ServerEntry, list[ToolSpec]], ...],
                       ) -> bool:
        """Whether every server of a cached offer still has the record and the
        live listing it was computed from (no trip to the loop: see `_warm`)."""
        if self._closed:
            return False
        for sid, entry, specs in listings:
            conn = self._conns.get(sid)
            tools = conn.cached_tools() if conn is not None else None
            cached = self._specs.get(sid)
            if tools is None or cached is None or cached[0] is not tools \
                    or cached[1] is not specs or self.registry.entries.get(sid) is not entry:
                return False
        return True

    def approval(self, server_id: str, tool: str, *,
                 host_default: Approval = Approval.ALLOW) -> Approval:
        """What the record's `[approval_policy]` says about a call to `tool`."""
        entry = self.registry.get(server_id)
        if entry is None:
            return Approval.DENY
        policy = entry.record.approval_policy
        return approval_for(tool, policy.default_policy, policy.per_tool,
                            host_default=host_default)

    def call_tool(self, server_id: str, tool: str, arguments: Any, *,
                  timeout_s: float | None = None, deadline: float | None = None,
                  cancel: threading.Event | None = None,
                  max_output_bytes: int | None = None) -> McpOutcome:
        """Call `tool`; the record's budget, `timeout_s` and `deadline`
        (monotonic), whichever ends first, bound it, and `cancel` stops it."""
        start = time.monotonic()

        def outcome(content: str, code: str | None, is_error: bool,
                    cut: bool = False) -> McpOutcome:
            return McpOutcome(content, is_error, code, (time.monotonic() - start) * 1000,
                              server_id, tool, cut)

        limit = 64 * 1024 if max_output_bytes is None else max_output_bytes
        try:
            entry = self._usable(server_id)
            budgets = entry.record.budgets
            limit = min(limit, budgets.max_tool_output_bytes)
            allowed = entry.record.allowed_tools
            if not allowed or not match_any(allowed, tool):
                raise McpError(r.MCP_DENIED, f"tool {tool!r} is not in server {server_id!r}'s "
                                             "allowed_tools")
            if not isinstance(arguments, dict):
                raise McpError(r.MCP_INVALID_ARGUMENTS, "arguments must be a JSON object")
            if cancel is not None and cancel.is_set():
                raise McpError(r.MCP_CANCELLED, "cancelled before the call")
            budget_s = budgets.tool_timeout_ms / 1000
            if timeout_s is not None:
                budget_s = min(budget_s, timeout_s)
            startup_s = budgets.effective_list_timeout_ms / 1000
            end = start + startup_s + budget_s
            if deadline is not None:
                if deadline <= start:
                    raise McpError(r.MCP_TIMEOUT, "the caller's deadline had already passed")
                end = min(end, deadline)
            result = self._run(self._call(server_id, tool, arguments, end, budget_s), end, cancel)
        except McpError as exc:
            return outcome(r.error_content(exc.code, exc.message, limit), exc.code, True)
        rendered = r.render_result(result, limit)
        return outcome(rendered.content, rendered.code, rendered.is_error, rendered.truncated)

    async def _call(self, server_id: str, tool: str, arguments: dict[str, Any], end: float,
                    budget_s: float) -> dict[str, Any]:
        conn = self._conn(server_id)
        if conn.knows(tool) is False:
            raise McpError(r.MCP_UNKNOWN_TOOL, f"server {server_id!r} has no tool {tool!r}")
        result = await conn.call(tool, arguments, deadline=end, budget_s=budget_s)
        wire: dict[str, Any] = result.model_dump(by_alias=True, mode="json", exclude_none=True)
        return wire

    # -- status and lifetime -----------------------------------------------

    def status(self, *, probe: bool = False, deadline: float | None = None) -> list[ServerStatus]:
        """One row per registry entry; `probe` starts each usable server and
        lists its tools first (for `spearpy mcp list`)."""
        if probe and not self._closed:
            self.collect_tools(self.server_ids(), deadline=deadline)
        snapshot: dict[str, tuple[Any, ...]] = {}
        if self._loop.running:
            async def snap() -> dict[str, tuple[Any, ...]]:
                return {sid: (c.state, c.last_error, c.starts, c.pid, c.cached_tools())
                        for sid, c in self._conns.items()}
            try:
                snapshot = self._loop.run(snap(), deadline=time.monotonic() + 5.0)
            except (BridgeTimeout, LoopClosed):
                snapshot = {}
        rows = []
        for entry in self.registry:
            rec = entry.record
            state, error, starts, pid, tools = snapshot.get(entry.server_id,
                                                            ("idle", None, 0, None, None))
            shown = hidden = None
            if tools is not None:
                names = [t.name for t in tools]
                shown = tuple(n for n in names
                              if rec.allowed_tools and match_any(rec.allowed_tools, n))
                hidden = len(names) - len(shown)
            if not entry.enabled:
                state = "disabled"
            elif self._closed:
                state = "closed"
            rows.append(ServerStatus(entry.server_id, rec.display_name, rec.transport, entry.source,
                                     state,
                                     entry.disabled_reason, error, starts, pid, shown, hidden))
        return rows

    def close(self) -> None:
        """Stop every server (stdio processes are ended) and the loop thread."""
        self._closed = True
        self._finalizer()

    def __enter__(self) -> McpManager:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()


def _shutdown(loop: LoopThread, conns: dict[str, Connection], timeout: float) -> None:
    async def close_all() -> None:
        if conns:
            await asyncio.gather(*(c.close() for c in list(conns.values())),
                                 return_exceptions=True)

    loop.stop(close_all(), timeout)
