"""The MCP layer's plumbing without servers: the bounded line framer, finding
the id of an oversized reply, backoff, and the sync bridge to the loop thread."""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from spearpy.mcp.connection import backoff_s, message_cap
from spearpy.mcp.loop_thread import BridgeCancelled, BridgeTimeout, LoopClosed, LoopThread
from spearpy.mcp.transports import LineFramer, oversize_id


def test_framer_splits_lines_across_chunks() -> None:
    framer = LineFramer(100)
    lines = [*framer.feed(b'{"a":1}\n{"b"'), *framer.feed(b':2}\n\n'), *framer.feed(b"tail")]
    assert [line.data for line in lines] == [b'{"a":1}', b'{"b":2}', b""]
    assert [line.data for line in framer.feed(b"\n")] == [b"tail"]


def test_framer_keeps_only_the_ends_of_a_huge_line() -> None:
    framer = LineFramer(1000)
    head = b'{"jsonrpc":"2.0","id":7,"result":"'
    out = list(framer.feed(head))
    chunk = b"x" * 65536
    for _ in range(1600):  # 100 MiB, fed like a pipe would
        out += framer.feed(chunk)
        assert sum(len(p) for p in framer._parts) <= 1000  # never more than the limit kept
    out += framer.feed(b'"}\n{"next":1}\n')
    assert len(out) == 2
    big, after = out
    assert big.oversized and big.size == len(head) + 100 * 1024 * 1024 + len(b'"}')
    assert len(big.data) <= 1024 and len(big.tail) <= 1024
    assert oversize_id(big.data, big.tail) == 7
    assert after.data == b'{"next":1}' and not after.oversized


@pytest.mark.parametrize(("head", "tail", "expected"), [
    (b'{"jsonrpc":"2.0","id":12,"result":{"content":[', b"", 12),
    (b'{"id":"abc","jsonrpc":"2.0","result"', b"", "abc"),
    (b'{"result":{"content":[{"type":"text","text":"xx', b'xx"}]},"jsonrpc":"2.0","id":5}', 5),
    (b'{"result":{"x":"y', b'yy"},"id":"q\\"1","jsonrpc":"2.0"}\r', 'q"1'),
    (b'{"result":{"text":"\\"id\\":9', b'zz"}}', None),  # an id inside the payload is not it
])
def test_oversize_id_comes_from_either_end(head: bytes, tail: bytes,
                                           expected: int | str | None) -> None:
    assert oversize_id(head, tail) == expected


def test_backoff_and_message_cap() -> None:
    assert [backoff_s(n) for n in range(1, 6)] == [0.0, 0.5, 1.0, 2.0, 4.0]
    assert backoff_s(50) == 30.0
    assert message_cap(64 * 1024) == 1024 * 1024
    assert message_cap(10 * 1024 * 1024) == 40 * 1024 * 1024 + 256 * 1024


def test_bridge_returns_results_and_raises_errors() -> None:
    loop = LoopThread("test-mcp-loop")

    async def answer() -> int:
        await asyncio.sleep(0.01)
        return 42

    async def boom() -> None:
        raise ValueError("inside the loop")

    assert loop.run(answer()) == 42
    with pytest.raises(ValueError, match="inside the loop"):
        loop.run(boom())
    names = [t.name for t in threading.enumerate()]
    assert names.count("test-mcp-loop") == 1
    loop.stop()
    assert "test-mcp-loop" not in [t.name for t in threading.enumerate()]
    with pytest.raises(LoopClosed):
        loop.run(answer())


def test_bridge_deadline_and_cancel_stop_the_coroutine() -> None:
    loop = LoopThread()
    finished: list[str] = []

    async def slow(tag: str) -> None:
        try:
            await asyncio.sleep(30)
        finally:
            finished.append(tag)

    start = time.monotonic()
    with pytest.raises(BridgeTimeout):
        loop.run(slow("deadline"), deadline=time.monotonic() + 0.2)
    assert time.monotonic() - start < 3
    cancel = threading.Event()
    threading.Timer(0.2, cancel.set).start()
    with pytest.raises(BridgeCancelled):
        loop.run(slow("cancel"), cancel=cancel)
    end = time.monotonic() + 3
    while len(finished) < 2 and time.monotonic() < end:
        time.sleep(0.01)
    assert sorted(finished) == ["cancel", "deadline"]  # cancelled on the loop, cleanup ran
    loop.stop()


def test_a_waiting_caller_learns_that_the_loop_stopped() -> None:
    loop = LoopThread("stopped-under-a-caller")
    started = threading.Event()

    async def forever() -> None:
        started.set()
        await asyncio.Event().wait()

    raised: list[BaseException] = []

    def caller() -> None:
        try:
            loop.run(forever(), deadline=time.monotonic() + 30, cancel=threading.Event())
        except BaseException as exc:
            raised.append(exc)

    thread = threading.Thread(target=caller)
    thread.start()
    assert started.wait(5)
    loop.stop(timeout=2)
    thread.join(10)
    assert not thread.is_alive() and len(raised) == 1 and isinstance(raised[0], LoopClosed)


def test_stop_from_the_loop_thread_itself() -> None:
    loop = LoopThread("self-stopping")
    cleaned = threading.Event()

    async def cleanup() -> None:
        cleaned.set()

    async def stop_here() -> None:
        loop.stop(cleanup())

    loop.submit(stop_here())
    assert cleaned.wait(3)
    end = time.monotonic() + 3
    while "self-stopping" in [t.name for t in threading.enumerate()]:
        assert time.monotonic() < end
        time.sleep(0.01)


def test_bridge_refuses_to_deadlock_on_its_own_thread() -> None:
    loop = LoopThread()

    async def nested() -> str:
        async def inner() -> str:
            return "never"

        try:
            loop.run(inner())
        except RuntimeError as exc:
            return str(exc)
        return "ran"

    assert "own loop thread" in loop.run(nested())
    loop.stop()


def test_pure_parts_never_load_the_sdk() -> None:
    code = ("import sys, spearpy.mcp as m\n"
            "m.TaskPolicy, m.ToolSpec, m.McpOutcome, m.load_registry, m.spear_tool_name\n"
            "m.render_result, m.approval_for\n"
            "print(sorted(n for n in sys.modules if n == 'mcp' or n.startswith('mcp.')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_nothing_outside_spearpy_mcp_imports_the_sdk() -> None:
    root = Path(__file__).resolve().parents[1] / "spearpy"
    pattern = re.compile(r"^\s*(from|import)\s+(mcp|mcp_types)(\.|\s|$)", re.M)
    offenders = [str(p.relative_to(root)) for p in root.rglob("*.py")
                 if "mcp" not in p.relative_to(root).parts[:1] and pattern.search(p.read_text())]
    assert offenders == []
