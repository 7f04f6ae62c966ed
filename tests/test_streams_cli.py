"""`spearpy run --stream-stdio` as a user runs it: a real subprocess, stdin
lines in, the guest's frames out, exit when the guest ends. The echo runs as
the C sample and as its Rust twin."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ECHO = ROOT / "wasm-samples" / "c_user_stream_echo.wasm"
ECHOES = [ECHO, ROOT / "wasm-samples" / "rust_user_stream_echo.wasm"]
each_echo = pytest.mark.parametrize("echo", ECHOES, ids=lambda p: p.stem)
CHAT = ROOT / "wasm-samples" / "c_stream_chat.wasm"
CHAT_SCRIPT = ROOT / "wasm-samples" / "scripts" / "stream_chat.json"
HANG_GUARD_S = 120


def spearpy(*args: str, stdin: bytes = b"") -> subprocess.CompletedProcess[bytes]:
    cmd = [sys.executable, "-c", "from spearpy.cli import main; main()", *args]
    return subprocess.run(cmd, input=stdin, capture_output=True, timeout=HANG_GUARD_S,
                          check=False, cwd=ROOT)


@each_echo
def test_hello_comes_back_and_the_run_exits_0(echo: Path) -> None:
    proc = spearpy("run", "--no-cache", str(echo), "--stream-stdio", stdin=b"hello\n")
    assert proc.returncode == 0, proc.stderr.decode()
    assert proc.stdout == b"hello\n"
    assert b"session closed: 1 frames echoed" in proc.stderr


@each_echo
def test_many_lines_come_back_in_order_through_small_queues(echo: Path) -> None:
    lines = b"".join(b"line %05d %s\n" % (i, b"x" * (i % 300)) for i in range(3000))
    proc = spearpy("run", "--no-cache", str(echo), "--stream-stdio", "--stream-id", "77",
                   stdin=lines)
    assert proc.returncode == 0, proc.stderr.decode()[-2000:]
    assert proc.stdout == lines
    assert b"stream_id=77" in proc.stderr


def test_a_question_gets_the_tool_loop_answer_streamed_back() -> None:
    proc = spearpy("run", "--no-cache", "--backend", f"scripted:{CHAT_SCRIPT}", str(CHAT),
                   "--stream-stdio", stdin=b"what is 7 + 35?\nand hello?\n")
    assert proc.returncode == 0, proc.stderr.decode()
    assert proc.stdout == (b"7 + 35 = 42\n"
                           b"Ask me to add two numbers, like: what is 7 + 35?\n")
    assert b"session closed: 2 questions answered" in proc.stderr


@each_echo
def test_without_a_stream_source_the_guest_hears_enotconn(echo: Path) -> None:
    proc = spearpy("run", "--no-cache", str(echo))
    assert proc.returncode == 1
    assert b"user_stream_ctl_open failed: -107" in proc.stdout


def test_stream_flags_that_do_not_fit_are_usage_errors() -> None:
    proc = spearpy("run", str(ECHO), "--stream-id", "3")
    assert proc.returncode == 2 and b"--stream-id goes with --stream-stdio" in proc.stderr
    proc = spearpy("run", str(ECHO), "--stream-stdio", "--stdin", "-")
    assert proc.returncode == 2 and b"both read this stdin" in proc.stderr
