"""A run keeps its guest's last log lines in a bounded ring (SPEAR's API
returns them the same way): RunResult.logs, oldest first, the count of
older lines dropped, and the bytes held charged to the run."""

from __future__ import annotations

from pathlib import Path

from spearpy.config import HostConfig
from spearpy.host import Host
from spearpy.hostcalls import system
from spearpy.logring import MAX_BYTES, MAX_LINES, LogRing
from spearpy.testing.context import BytesMemory, fake_context

SAMPLES = Path(__file__).resolve().parents[1] / "wasm-samples"


def test_a_flooding_guest_leaves_its_last_lines_and_says_how_many_it_dropped() -> None:
    with Host(cache_dir=None, max_log_bytes=2 << 20) as host:
        result = host.run(str(SAMPLES / "c_log_flood.wasm"))
    assert result.outcome == "log_limit"
    assert len(result.logs) == MAX_LINES and result.logs_dropped > 0
    assert all(set(line) == {"level", "text"} for line in result.logs)
    assert sum(len(line["text"]) for line in result.logs) <= MAX_BYTES


def test_the_ring_keeps_the_newest_lines_in_order_and_its_bytes_are_charged() -> None:
    ctx = fake_context(config=HostConfig(cache_dir=None, max_log_bytes=1 << 20))
    memory = ctx.memory
    assert isinstance(memory, BytesMemory)
    before = ctx.host_bytes
    for i in range(MAX_LINES + 5):
        ptr, length = memory.put(0, f"line {i}")
        assert system.log(ctx, 1, ptr, length) == 0
    texts = [line["text"] for line in ctx.logs.lines()]
    assert texts[0] == "line 5" and texts[-1] == f"line {MAX_LINES + 4}"
    assert ctx.logs.dropped == 5
    assert ctx.host_bytes - before == ctx.logs.held_bytes > 0


def test_a_ring_bounded_by_bytes_evicts_before_it_grows_past_them() -> None:
    ring = LogRing(max_lines=100, max_bytes=2000)
    for i in range(50):
        ring.add("info", f"{i:03d}" + "x" * 97)
    assert ring.held_bytes <= 2000
    assert ring.lines()[-1]["text"].startswith("049") and ring.dropped > 0
