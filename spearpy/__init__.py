"""spearpy: a WebAssembly host for SPEAR-ABI agents.

    from spearpy import Host

    with Host(base_url="http://127.0.0.1:8080/v1", model="gpt-4o-mini") as host:
        result = host.run("agent.wasm", ["question"])
        print(result.outcome, result.exit_code, result.stdout)

The embedding API is documented in docs/embedding.md.

Names are imported on first use: `import spearpy.cli` (every `spearpy`
command) or `spearpy.testing` must not pay for the host's imports first.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from spearpy._lazy import lazy_names

__version__ = "0.1.0"  # the package version (pyproject.toml reads it from here)

if TYPE_CHECKING:
    from spearpy.backends.base import Backend, CompletionRequest
    from spearpy.chat.protocol import CompletionResult
    from spearpy.config import HostConfig
    from spearpy.embed import RunHandle
    from spearpy.errors import ConfigError, ModuleLoadError, SpearpyError
    from spearpy.host import Host, LoadedModule
    from spearpy.outcome import EXIT_CODES, RunResult
    from spearpy.tools.python import PythonTools

_WHERE = {
    "EXIT_CODES": "outcome", "ConfigError": "errors", "Host": "host", "HostConfig": "config",
    "LoadedModule": "host", "ModuleLoadError": "errors", "RunHandle": "embed",
    "RunResult": "outcome", "SpearpyError": "errors", "Backend": "backends.base",
    "CompletionRequest": "backends.base", "CompletionResult": "chat.protocol",
    "PythonTools": "tools.python",
}
__all__ = [
    "EXIT_CODES",
    "Backend",
    "CompletionRequest",
    "CompletionResult",
    "ConfigError",
    "Host",
    "HostConfig",
    "LoadedModule",
    "ModuleLoadError",
    "PythonTools",
    "RunHandle",
    "RunResult",
    "SpearpyError",
]


__getattr__ = lazy_names(__name__, _WHERE)
