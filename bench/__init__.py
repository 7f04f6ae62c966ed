"""spearpy's benchmark suite: `python -m bench` (see docs/benchmarks.md).

Every figure is a ratio against a baseline measured in the same run, with the
two interleaved, so machine noise hits both sides alike. Absolute times are
reported, never asserted.
"""
