"""The Hosts a run can get: the configured one, and one per model/backend a
run may pick instead (a Host's default model and backend are its
configuration). The service holds one pool, each worker another."""

from __future__ import annotations

import threading

from spearpy.host import Host


class HostPool:
    def __init__(self, host: Host, owned: bool) -> None:
        self._base = host
        self._owned = owned
        self._lock = threading.Lock()
        self._hosts: dict[tuple[str | None, str | None], Host] = {(None, None): host}

    @property
    def base(self) -> Host:
        return self._base

    def get(self, model: str | None, backend: str | None) -> Host:
        key = (model, backend)
        with self._lock:
            host = self._hosts.get(key)
            if host is None:
                update = {k: v for k, v in (("model", model), ("backend", backend)) if v}
                # From the configuration (backends, MCP registry): objects an
                # embedder attached to the base Host are not copied.
                host = self._hosts[key] = Host(self._base.config.model_copy(update=update))
            return host

    def close(self, grace: float) -> None:
        with self._lock:
            hosts = list(self._hosts.values())
        for host in hosts:
            if host is not self._base or self._owned:
                host.close(grace)
