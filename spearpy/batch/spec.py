"""What every batch worker needs to become a warm Host: picklable, so it can
travel to worker processes and Ray actors."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from spearpy.config import HostConfig
    from spearpy.host import Host, LoadedModule


@dataclass(frozen=True, slots=True)
class WorkerSpec:
    # HostConfig as a plain dict: every field is given explicitly, so a worker
    # whose environment differs (SPEARPY_*, OPENAI_BASE_URL) still builds the
    # same Host. Only the API key is read from the worker's own environment.
    config: dict[str, Any]
    # The module's bytes rather than its path: every worker runs exactly what
    # the batch started with, even on another machine.
    wasm: bytes
    name: str
    threads: int = 1
    transcripts: bool = False

    @classmethod
    def build(cls, config: HostConfig, wasm: bytes, name: str, *, threads: int = 1,
              transcripts: bool = False) -> WorkerSpec:
        return cls(config.model_dump(), wasm, name, threads, transcripts)

    def host_config(self) -> HostConfig:
        from spearpy.config import HostConfig

        return HostConfig(**self.config)

    def warm_host(self) -> tuple[Host, LoadedModule]:
        """A Host with the module compiled (from the disk cache when warm)."""
        from spearpy.host import Host

        host = Host(self.host_config())
        try:
            return host, host.load(self.wasm, self.name)
        except BaseException:
            host.close()
            raise
