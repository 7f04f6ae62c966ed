"""Building guests to wasm32: `spearpy build`, and the samples (tools/build_wasm.sh).

    from spearpy.build import build_path
    built = build_path(Path("my-agent"))   # a Cargo project, C files, a .c or .rs file
    print(built.wasm)

Raises ToolchainMissing (its message names the install command),
BuildFailed (the compiler refused) or NothingToBuild.
"""

from __future__ import annotations

from spearpy.build.compile import BuildFailed, Built, NothingToBuild, build_path
from spearpy.build.toolchains import ToolchainMissing, find_c, find_rust

# Exit codes of `spearpy build` and tools/build_wasm.sh.
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_TOOLCHAIN_MISSING = 3

__all__ = ["EXIT_FAILED", "EXIT_TOOLCHAIN_MISSING", "EXIT_USAGE", "BuildFailed", "Built",
           "NothingToBuild", "ToolchainMissing", "build_path", "find_c", "find_rust"]
