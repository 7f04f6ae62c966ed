"""spearpy: a WebAssembly host for SPEAR-ABI agents."""
