"""What a batch runs: the module and the Host configuration its workers get,
and what every run of it gets besides its input."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from spearpy.batch.jobs import RunSettings

if TYPE_CHECKING:
    from spearpy.batch.run_journals import RunJournals
    from spearpy.config import HostConfig
    from spearpy.host import Host, LoadedModule


@dataclass(frozen=True, slots=True)
class WorkerSpec:
    # HostConfig as a plain dict, every field given: what the workers are
    # built from (spearpy/executors/worker.py).
    config: dict[str, Any]
    # The module's bytes rather than its path: every worker runs exactly what
    # the batch started with, even on another machine.
    wasm: bytes
    name: str
    transcripts: bool = False
    settings: RunSettings = field(default_factory=RunSettings)
    # Where each input's run is journaled (None: not journaled). Stays in
    # the batch's process: a run gets its journal's JournalSpec.
    journals: RunJournals | None = None

    @classmethod
    def build(cls, config: HostConfig, wasm: bytes, name: str, *,
              transcripts: bool = False, settings: RunSettings | None = None,
              journals: RunJournals | None = None) -> WorkerSpec:
        return cls(config.model_dump(), wasm, name, transcripts,
                   settings or RunSettings(), journals)

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
