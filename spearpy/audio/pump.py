"""The thread that moves a source's frames into a mic fd.

Paced sources (the stub, a file at `mic_pace = "realtime"`) hand out one
frame per frame_ms and, like a real microphone, never wait for the reader:
a full queue drops its oldest frames. Unpaced ones (a file at "fast") wait
for room, so the guest gets every frame as fast as it reads; a device is
paced by its own hardware. `stop()` ends the thread at once: every wait it
makes is on the stop event or on the sink's condition, which `stop` wakes.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Protocol

# How long stop() waits for the thread (a device read returns within one
# frame); a thread still inside a blocking library call after that is left
# to finish on its own: it is a daemon and pushes nothing once stopped.
JOIN_TIMEOUT_S = 2.0


class FrameSink(Protocol):
    """Where frames go (spearpy.fds.mic.MicFd). Every call carries the
    generation the pump was started for; a stale one is ignored."""

    def push(self, frame: bytes, generation: int, wait_for_room: bool,
             stop: threading.Event) -> bool:
        """False when the pump should stop (stale generation, stopped)."""
        ...

    def finish(self, generation: int) -> None: ...
    def fail(self, message: str, generation: int) -> None: ...


class Source(Protocol):
    name: str
    paced: bool  # the pump spaces frames by frame_ms
    lossless: bool  # the pump waits for room rather than drop

    def frames(self) -> Iterator[bytes]: ...
    def close(self) -> None: ...


class Pump:
    __slots__ = ("_frame_s", "_generation", "_sink", "_source", "_stop", "_thread")

    def __init__(self, source: Source, sink: FrameSink, generation: int,
                 frame_ms: int) -> None:
        self._source = source
        self._sink = sink
        self._generation = generation
        self._frame_s = frame_ms / 1000.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"spearpy-mic-{source.name}",
                                        daemon=True)

    def start(self) -> None:
        self._thread.start()

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(JOIN_TIMEOUT_S)

    def _run(self) -> None:
        source, sink, stop, generation = self._source, self._sink, self._stop, self._generation
        next_at = time.monotonic()
        try:
            for frame in source.frames():
                if source.paced:
                    next_at += self._frame_s
                    delay = next_at - time.monotonic()
                    if delay > 0 and stop.wait(delay):
                        return
                if stop.is_set() or not sink.push(frame, generation, source.lossless, stop):
                    return
            if not stop.is_set():
                sink.finish(generation)
        except Exception as exc:  # a source's failure is the fd's error, never the host's
            if not stop.is_set():
                sink.fail(f"{source.name} source: {exc}", generation)
        finally:
            source.close()
