"""One rtasr fd's realtime WebSocket connection, on threads of its own.

The connect thread opens the connection (bounded by a connect timeout and
the run's deadline; a refused or failed handshake is retried as the chat
backends retry a request, up to HostConfig.max_retries times with their
backoff, never past the deadline), sends the session update, then becomes the writer: it
sends what the guest queued, base64 audio as `input_audio_buffer.append`.
A reader thread hands every server message to the fd, secrets scrubbed.
websockets' sync client bounds one message (max_size) and what it buffers
(max_queue); the fd bounds its event queue. The upstream's messages reach
the guest as they came (SPEAR does the same), JSON or not.

A clean close from the server is HUP; any other end (a dropped TCP
connection, a refused handshake, a message over the size limit) is ERR with
a `last_error` saying what happened. Stopping (the guest's close, the run's
end) never blocks on the network unless flush_on_close asks for the queued
audio and a commit to be sent first, and then for FLUSH_TIMEOUT_S at most,
never past the run's deadline, and not at all in a cancelled run.
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING

from spearpy.asr import protocol
from spearpy.asr.worker import ThreadWorker
from spearpy.retry import (
    RetryPolicy,
    backoff_delay,
    retry_after_seconds,
    status_is_retryable,
)

if TYPE_CHECKING:
    from websockets.sync.client import ClientConnection

    from spearpy.fds.rtasr import RtAsrFd
    from spearpy.interrupts import Interrupts
    from spearpy.observe.scrub import SecretScrubber

CONNECT_TIMEOUT_S = 20.0  # SPEAR's
FLUSH_TIMEOUT_S = 2.0
CLOSE_TIMEOUT_S = 1.0
MAX_MESSAGE_BYTES = 1 << 20
# Messages websockets buffers before it stops reading the socket (TCP then
# pushes back on a flooding server).
MAX_BUFFERED_MESSAGES = 64
_IDLE_S = 0.05


class RealtimeConnection(ThreadWorker):
    def __init__(self, fd: RtAsrFd, url: str, headers: dict[str, str], session_event: str,
                 scrubber: SecretScrubber, interrupts: Interrupts, max_retries: int = 0) -> None:
        super().__init__(fd, "spearpy-rtasr")
        self._max_retries = max_retries
        self._url = url
        self._headers = headers
        self._session_event = session_event
        self._scrubber = scrubber
        self._interrupts = interrupts
        self._deadline = interrupts.deadline
        self._flush = False
        self._connected = False

    def stop(self, flush: bool) -> None:
        # A cancelled or timed-out run flushes nothing: it must end now.
        flush = flush and self._interrupts.run_reason() is None
        self._flush = flush
        self._stopping.set()
        with self._fd.cond:
            self._fd.cond.notify_all()
        if flush:
            # The guest asked for its audio to reach the server before the fd goes.
            wait = FLUSH_TIMEOUT_S
            if self._deadline is not None:
                wait = max(0.0, min(wait, self._deadline - time.monotonic()))
            self._done.wait(wait)

    # ---- threads ---------------------------------------------------------

    def _run(self) -> None:
        from websockets.sync.client import connect

        policy = RetryPolicy(max_retries=self._max_retries)
        retries = 0
        while True:
            timeout = CONNECT_TIMEOUT_S
            if self._deadline is not None:
                timeout = max(0.01, min(timeout, self._deadline - time.monotonic()))
            try:
                with connect(self._url, additional_headers=self._headers, open_timeout=timeout,
                             close_timeout=CLOSE_TIMEOUT_S, max_size=MAX_MESSAGE_BYTES,
                             max_queue=MAX_BUFFERED_MESSAGES, compression=None, proxy=None,
                             user_agent_header="spearpy") as ws:
                    self._connected = True
                    self._serve(ws)
                return
            except Exception as exc:  # a thread must not die silently: the fd says why
                delay = self._retry_delay(exc, policy, retries + 1)
                if delay is None:
                    self._fd.fail(self._clean(self._failure(exc, timeout)))
                    return
            retries += 1
            if self._stopping.wait(delay):
                return

    def _retry_delay(self, exc: Exception, policy: RetryPolicy, retry: int) -> float | None:
        """How long to wait before connecting again, as the chat backends
        retry (connection errors, timeouts, 408/409/429/5xx; Retry-After
        honoured); None when this failure is final."""
        from websockets.exceptions import InvalidStatus

        if self._connected or retry > policy.max_retries or self._stopping.is_set():
            return None
        hint = None
        if isinstance(exc, InvalidStatus):
            if not status_is_retryable(exc.response.status_code, None):
                return None
            hint = retry_after_seconds(dict(exc.response.headers.raw_items()))
        elif not isinstance(exc, (OSError, TimeoutError)):
            return None
        delay = backoff_delay(policy, retry, hint)
        if self._deadline is not None and time.monotonic() + delay >= self._deadline:
            return None
        return delay

    def _failure(self, exc: Exception, timeout: float) -> str:
        from websockets.exceptions import InvalidHandshake, InvalidStatus, InvalidURI

        if isinstance(exc, InvalidStatus):
            status = exc.response.status_code
            hint = " (check the key in the realtime key variable)" if status in (401, 403) else ""
            return f"websocket connect failed: the server refused the handshake with HTTP " \
                   f"{status}{hint}"
        if not self._connected and isinstance(exc, TimeoutError):
            return f"websocket connect timed out after {timeout:.1f} s"
        if not self._connected and isinstance(exc, (OSError, InvalidHandshake, InvalidURI)):
            return f"websocket connect failed: {exc}"
        return f"rtasr connection failed: {type(exc).__name__}: {exc}"

    def _serve(self, ws: ClientConnection) -> None:
        if self._stopping.is_set() and not self._flush:
            return
        ws.send(self._session_event)
        self._fd.set_connected()
        reader = threading.Thread(target=self._read, args=(ws,), name="spearpy-rtasr-read",
                                  daemon=True)
        reader.start()
        try:
            self._write(ws)
        finally:
            ws.close()
            reader.join(CLOSE_TIMEOUT_S * 2)

    def _write(self, ws: ClientConnection) -> None:
        from websockets.exceptions import ConnectionClosed

        fd = self._fd
        flush_until: float | None = None
        while True:
            if self._stopping.is_set():
                if not self._flush:
                    return
                if flush_until is None:
                    flush_until = time.monotonic() + FLUSH_TIMEOUT_S
                    fd.flush_marker(protocol.COMMIT, pending=True)
                if time.monotonic() >= flush_until:
                    return
            item = fd.next_item(self._stopping, _IDLE_S)
            if item is None:
                if flush_until is not None or (self._stopping.is_set() and not self._flush):
                    return  # flushed: everything queued went out, the commit last
                continue
            try:
                ws.send(protocol.append(item) if isinstance(item, bytes) else item)
            except ConnectionClosed:
                return  # the reader reports how it ended

    def _read(self, ws: ClientConnection) -> None:
        from websockets.exceptions import ConnectionClosedError, ConnectionClosedOK

        fd = self._fd
        try:
            for message in ws:
                data = message.encode("utf-8", "surrogatepass") if isinstance(message, str) \
                    else message
                fd.push_event(self._scrubber.raw(data))
        except ConnectionClosedOK:
            pass
        except ConnectionClosedError as exc:
            if not self._stopping.is_set():
                fd.fail(self._clean(_closed_reason(exc)))
            return
        if not self._stopping.is_set():
            fd.hang_up()

    def _clean(self, text: str) -> str:
        return self._scrubber.text(text)


def _closed_reason(exc: Exception) -> str:
    from websockets.exceptions import ConnectionClosed

    if isinstance(exc, ConnectionClosed):
        rcvd, sent = exc.rcvd, exc.sent
        if rcvd is None and sent is not None and sent.code == 1009:
            return f"websocket closed: a server message was over {MAX_MESSAGE_BYTES} bytes"
        if rcvd is None:
            return "websocket closed: the connection dropped without a close frame"
        reason = f" ({rcvd.reason})" if rcvd.reason else ""
        return f"websocket closed by the server with code {rcvd.code}{reason}"
    return f"websocket read failed: {exc}"
