"""What every batch worker needs to become a warm Host: picklable, so it can
travel to worker processes and Ray actors."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from spearpy.batch.jobs import RunSettings

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
    settings: RunSettings = field(default_factory=RunSettings)

    @classmethod
    def build(cls, config: HostConfig, wasm: bytes, name: str, *, threads: int = 1,
              transcripts: bool = False, settings: RunSettings | None = None) -> WorkerSpec:
        return cls(config.model_dump(), wasm, name, threads, transcripts,
                   settings or RunSettings())

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
