"""`spearpy run --stream-stdio`: one bidirectional user stream on the terminal.

Each line of stdin becomes one inbound DATA frame (newline kept, seq 1, 2,
...); the data of every frame the guest writes goes to stdout as it comes.
A full inbound queue stops the reading of stdin, so a fast pipe waits for
the guest instead of filling memory.

At the end of input the bridge waits for the guest to answer before it ends
the session: until the guest has read every line, stdout has everything it
wrote, and the guest, woken, looks at its streams and finds nothing to read
while writing nothing more for a short grace. Only then does the guest get
SESSION_CLOSED, so `printf 'hello\\n' | spearpy run echo.wasm --stream-stdio`
prints `hello` before the guest hears that the user left.
"""

from __future__ import annotations

import threading
from typing import BinaryIO

import spearpy.streams.ssf as ssf
from spearpy.streams.hub import StreamHub
from spearpy.streams.session import SessionClosed

# After the guest looked and found nothing to read: how long it must also stay
# quiet (no read, no write) before the input is over for it. It covers a guest
# that has just been told it may write and has not written yet.
QUIET_S = 0.05


class StdioBridge:
    def __init__(self, hub: StreamHub, stream_id: int, stdin: BinaryIO, stdout: BinaryIO) -> None:
        self.hub = hub
        self.stream_id = stream_id
        self._stdin = stdin
        self._stdout = stdout
        self.session = hub.connect("stdio")
        # Daemons: a reader blocked on a terminal must not keep the process alive.
        self._reader = threading.Thread(target=self._read, name="spearpy-stdio-in", daemon=True)
        self._writer = threading.Thread(target=self._write, name="spearpy-stdio-out",
                                        daemon=True)

    def start(self) -> StdioBridge:
        self._reader.start()
        self._writer.start()
        return self

    def join(self, timeout: float | None = None) -> None:
        """Wait for the guest's output to reach stdout (call once the run ended)."""
        self._writer.join(timeout)

    def _read(self) -> None:
        seq = 0
        try:
            for line in iter(self._stdin.readline, b""):
                seq += 1
                frame = ssf.build(self.stream_id, seq, line)
                if not self.session.push_wait(frame):
                    return
        except (SessionClosed, ssf.SsfError, OSError, ValueError):
            return  # the run ended, or stdin failed: nothing more to send
        self._end_of_input()

    def _end_of_input(self) -> None:
        hub, session = self.hub, self.session
        while not hub.ended:
            hub.wait_room(lambda: hub.ended or self._drained(), None)
            if not hub.wait_guest_idle(None):
                break  # the run ended
            if self._acted_within(QUIET_S):
                continue  # it read or wrote: not done yet
            if self._drained():
                break
        session.close("end of input")

    def _acted_within(self, seconds: float) -> bool:
        hub = self.hub
        before = hub.activity
        return hub.wait_room(lambda: hub.activity != before or hub.ended, seconds)

    def _drained(self) -> bool:
        return not self.hub.inbound_pending() and not self.session.outbound_pending()

    def _write(self) -> None:
        while True:
            raw = self.session.pop_wait(None)
            if raw is None:
                if self.session.finished:
                    return
                continue
            try:
                self._stdout.write(ssf.decode(raw).data)
                self._stdout.flush()
            except (OSError, ValueError):
                self.session.close("stdout closed", error=True)
                return
