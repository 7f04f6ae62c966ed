"""SPEAR's stub transport (an rtasr fd connected without `transport`
"websocket"): no network; the queued audio is consumed and a fake
`transcription.delta` event (text of 'a's) comes every
`stub_event_interval_ms` (100), every `stub_emit_completed_every`-th (20)
a `transcription.completed`, sized by `stub_event_payload_bytes` (256)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from spearpy import _json
from spearpy.asr.worker import ThreadWorker

if TYPE_CHECKING:
    from spearpy.fds.rtasr import RtAsrFd

_TICK_S = 0.01
# The guest sets these; bounded so a param cannot make the host build huge events.
MAX_PAYLOAD_BYTES = 64 * 1024


def _param(params: dict[str, Any], key: str, default: int) -> int:
    value = params.get(key)
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    return default


class StubTransport(ThreadWorker):
    def __init__(self, fd: RtAsrFd) -> None:
        super().__init__(fd, "spearpy-rtasr-stub")

    def _run(self) -> None:
        fd = self._fd
        seq = 0
        last = time.monotonic()
        while not self._stopping.wait(_TICK_S):
            fd.next_item(self._stopping, 0)
            params = dict(fd.params)
            interval = _param(params, "stub_event_interval_ms", 100) / 1000.0
            if time.monotonic() - last < interval:
                continue
            last = time.monotonic()
            seq += 1
            every = _param(params, "stub_emit_completed_every", 20)
            size = min(_param(params, "stub_event_payload_bytes", 256), MAX_PAYLOAD_BYTES)
            kind = "transcription.completed" if every and seq % every == 0 \
                else "transcription.delta"
            fd.push_event(_json.compact_bytes(
                {"type": kind, "seq": seq, "text": "a" * max(0, size - 80)}))
