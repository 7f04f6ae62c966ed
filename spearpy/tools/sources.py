"""The tool sources a Host offers to every session, beside the guest's own.

Two today: Python functions an embedder registered (`PythonTools`), and MCP
servers from the registry (`--mcp-dir`, the config file, `Host(mcp_servers=)`),
offered per send under SPEAR's three-layer policy. At each send the driver
calls `attach`, which refreshes the session registry's attached groups; the
loop then treats their tools like the guest's.

The MCP manager (and its event-loop thread and server processes) starts on
the first send that enables MCP, never with the Host.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from spearpy.chat.registry import Tool, ToolRegistry
from spearpy.observe.scrub import SecretScrubber
from spearpy.secret_env import is_secret_name, is_secret_value

if TYPE_CHECKING:
    from spearpy.chat.session import ChatSession
    from spearpy.mcp.client import McpManager
    from spearpy.mcp.policy import TaskPolicy
    from spearpy.mcp.source import McpTools
    from spearpy.tools.python import PythonTools

# (server id, why) for each MCP server that could not offer its tools.
FailureSink = Callable[[str, str], None]


class HostTools:
    def __init__(self, *, python_tools: PythonTools | None = None,
                 mcp_dirs: Iterable[Path] = (), mcp_servers: Iterable[Any] = (),
                 secrets: Iterable[str] = ()) -> None:
        self._python = python_tools
        self._python_tools: list[Tool] | None = None
        self._mcp_dirs = list(mcp_dirs)
        self._mcp_servers = list(mcp_servers)
        self._scrubber = SecretScrubber(secrets)
        self._lock = threading.Lock()
        self._manager: McpManager | None = None
        self._mcp: McpTools | None = None
        self._closed = False

    @property
    def has_mcp(self) -> bool:
        return bool(self._mcp_dirs or self._mcp_servers)

    def attach(self, session: ChatSession, task: TaskPolicy | None, *,
               deadline: float | None, cancel: threading.Event | None,
               on_failure: FailureSink) -> None:
        """Offer this send's host tools to `session` (none when nothing is configured)."""
        registry = session.registry
        if self._python is not None:
            registry.attach("python", self._python_specs())
        if task is None or not task.enabled or not self.has_mcp:
            return
        from spearpy.mcp.policy import session_from_params

        policy, _refused = session_from_params(task, session.params)
        mcp = self.mcp()
        if mcp is None:
            return
        offer = mcp.offer(task, policy, deadline=deadline, cancel=cancel)
        for server_id, why in offer.failures:
            on_failure(server_id, why)
        for name in registry.attach("mcp", offer.tools, offer.aliases):
            on_failure("", f"MCP tool {name!r} is hidden by a guest tool of the same name")

    def _python_specs(self) -> list[Tool]:
        assert self._python is not None
        specs = self._python.specs()
        cached = self._python_tools
        if cached is None or [t.name for t in cached] != [name for name, _ in specs]:
            # Built once per set of functions: the argument checks compile here.
            cached = [ToolRegistry.build(name, name, spec, self._python) for name, spec in specs]
            self._python_tools = cached
        return cached

    def mcp(self) -> McpTools | None:
        """The MCP tool source, started on first use; None after close()."""
        with self._lock:
            if self._closed:
                return None
            if self._mcp is None:
                from spearpy.mcp.client import McpManager
                from spearpy.mcp.registry import load_registry
                from spearpy.mcp.source import McpTools

                registry = load_registry(self._mcp_dirs, self._mcp_servers)
                # A credential a record hands its server (env, headers) is the
                # server's: what the server answers must not carry it to the model.
                for entry in registry.entries.values():
                    for name, value in (*entry.env.items(), *entry.headers.items()):
                        if is_secret_name(name) or is_secret_value(value):
                            self._scrubber.add(value)
                            self._scrubber.add(value.partition(" ")[2])  # "Bearer TOKEN"
                self._manager = McpManager(registry)
                self._mcp = McpTools(self._manager, self._scrubber)
            return self._mcp

    def close(self) -> None:
        with self._lock:
            self._closed = True
            manager, self._manager, self._mcp = self._manager, None, None
        if manager is not None:
            manager.close()


def task_policy(params: Mapping[str, Any]) -> TaskPolicy | None:
    """The run's MCP task layer, or None when no `mcp.*` task key is set."""
    if not any(key.startswith("mcp.") for key in params):
        return None
    from spearpy.mcp.policy import TaskPolicy

    return TaskPolicy.from_params(params)
