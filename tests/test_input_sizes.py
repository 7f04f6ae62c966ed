"""Sizes read from input are bounded before they size anything (issue 29, the
class of hole 4; the WAV header itself is tests/test_audio_wav_bounds.py).

- An upstream's Server-Sent Event that never ends (a line without a newline,
  or data lines without the blank line that closes the event) was kept and
  rescanned whole at every chunk: quadratic work, and memory up to the whole
  response. An event is now at most MAX_EVENT_BYTES, and each chunk is
  scanned once.
"""

from __future__ import annotations

from typing import Any

import pytest

from spearpy import abi
from spearpy.backends.streaming import SSEDecoder
from spearpy.instance import RunOptions
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
