"""spearpy: a WebAssembly host for SPEAR-ABI agents.

    from spearpy import Host

    with Host(base_url="http://127.0.0.1:8080/v1", model="gpt-4o-mini") as host:
        result = host.run("agent.wasm", ["question"])
        print(result.outcome, result.exit_code, result.stdout)

The embedding API is documented in docs/embedding.md.
"""

from spearpy.config import HostConfig
from spearpy.embed import RunHandle
from spearpy.errors import ConfigError, ModuleLoadError, SpearpyError
from spearpy.host import Host, LoadedModule
from spearpy.outcome import EXIT_CODES, RunResult

__all__ = [
    "EXIT_CODES",
    "ConfigError",
    "Host",
    "HostConfig",
    "LoadedModule",
    "ModuleLoadError",
    "RunHandle",
    "RunResult",
    "SpearpyError",
]
