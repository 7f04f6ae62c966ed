"""Sizes read from input are bounded before they size anything (issue 29, the
class of hole 4; the WAV header itself is tests/test_audio_wav_bounds.py).

- An upstream's Server-Sent Event that never ends (a line without a newline,
  or data lines without the blank line that closes the event) was kept and
  rescanned whole at every chunk: quadratic work, and memory up to the whole
  response. An event is now at most MAX_EVENT_BYTES, and each chunk is
  scanned once.
- rtasr queues: send-event text on fds never connected stayed queued,
  uncharged, 16 MiB an fd; the receive queues the upstream fills were 1 to
  16 MiB each whatever max_host_bytes said.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import wasmtime

from spearpy import abi
from spearpy.backends.sse import SSEDecoder
from spearpy.context import RunOptions
from spearpy.testing import ScriptedServer
from tests.probe import Probe, wat_module

pytestmark = pytest.mark.usefixtures("no_host_bugs")

OVER = 9 << 20  # past the 8 MiB one event may hold (streaming.MAX_EVENT_BYTES)


def _streamed_send(make_host: Any, wire: bytes) -> dict[str, Any]:
    script = {"default": {"body_text": wire.decode(),
                          "headers": {"Content-Type": "text/event-stream"}}}
    with ScriptedServer(script) as server:
        probe = Probe(make_host(base_url=server.base_url), wat_module("probe.wat"),
                      RunOptions(capture_output=True))
        try:
            fd = probe.hc("cchat_create")
            assert probe.set_param(fd, "stream", True) == 0
            assert probe.write_msg(fd, "user", "go") == 0
            return probe.recv_json(probe.hc("cchat_send", fd, abi.SEND_AUTO_TOOL_CALL))
        finally:
            probe.close()


@pytest.mark.parametrize("wire", [
    b"data: " + b"a" * OVER,  # one line that never ends
    b"data: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\n" * (OVER // 64),
], ids=["line_without_newline", "event_without_blank_line"])
def test_an_endless_sse_event_is_a_clear_error(make_host: Any, wire: bytes) -> None:
    body = _streamed_send(make_host, wire)
    assert body["error"]["code"] == "upstream_bad_response", body
    assert "sent an event of more than 8388608 bytes" in body["error"]["message"], body


def test_line_ends_split_across_chunks_end_one_line() -> None:
    """Scanning only the new chunk must still pair a CR ending one chunk with
    the LF opening the next (else a spurious blank line splits the event)."""
    d = SSEDecoder()
    out = d.feed(b"data: a\r") + d.feed(b"\ndata: b\r\n\r") + d.feed(b"\n") + \
        d.feed(b"data: c\r\r") + d.feed(b"da") + d.feed(b"ta: d\n") + d.close()
    assert out == [b"a\nb", b"c", b"d"]


# ---- rtasr queues ----------------------------------------------------------------------


def test_rtasr_events_queued_on_many_fds_are_charged(make_host: Any) -> None:
    """send-event text waits in the fd's send queue until a connection sends it,
    and an fd never connected never does: 32 fds each holding 256 KiB of
    events held 8 MiB under max_host_bytes 1 MiB (1024 fds of 16 MiB queues:
    16 GiB). Each event is now charged to the run's host budget, so the run
    ends with memory_limit instead."""
    p = Probe(make_host(base_url="http://127.0.0.1:9/v1", max_host_bytes=1 << 20),
              wat_module("rtasr_probe.wat"), RunOptions(capture_output=True))
    event = b'{"type":"x","pad":"' + b"p" * ((256 << 10) - 30) + b'"}'
    p.put(1 << 20, event)
    queued = 0
    try:
        for _ in range(32):
            fd = int(p.hc("rtasr_create"))
            p.u32(16, len(event))
            assert p.hc("rtasr_ctl", fd, 4, 1 << 20, 16) == 0
            queued += len(event)
    except wasmtime.WasmtimeError as exc:
        assert "max_host_bytes" in str(exc)
    finally:
        p.close()
    assert p.run.interrupts.noted is not None and p.run.interrupts.noted[0] == "memory_limit"
    assert 0 < queued <= 1 << 20


def test_rtasr_receive_queues_are_a_share_of_the_host_budget(make_host: Any) -> None:
    """The upstream fills the receive queue without charge: 16 connected fds
    of 16 MiB held 256 MiB whatever max_host_bytes said."""
    p = Probe(make_host(base_url="http://127.0.0.1:9/v1", max_host_bytes=1 << 20),
              wat_module("rtasr_probe.wat"), RunOptions(capture_output=True))
    try:
        fds = [int(p.hc("rtasr_create")) for _ in range(2)]
        key = b'{"key":"max_recv_queue_bytes","value":16777216}'
        p.put(1024, key)
        p.u32(16, len(key))
        assert p.hc("rtasr_ctl", fds[1], 1, 1024, 16) == 0
        for fd in fds:
            p.u32(16, 4096)
            n = int(p.hc("rtasr_ctl", fd, 3, 8192, 16))
            assert json.loads(p.get(8192, n))["max_recv_queue_bytes"] == (1 << 20) // 16
    finally:
        p.close()
