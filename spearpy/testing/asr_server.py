"""A scripted OpenAI-compatible realtime transcription server on 127.0.0.1.

A real WebSocket server (websockets' sync server, a thread per connection)
that takes what an rtasr fd sends: it records each session update, counts
the base64 audio of every `input_audio_buffer.append`, and for every
`ms_per_phrase` milliseconds of audio (pcm16 mono at 24 kHz, OpenAI's
format) transcribes the next phrase of its script: one
`conversation.item.input_audio_transcription.delta` per word, then a
`.completed` with the whole phrase. A commit transcribes what audio is left
over. Faults, for the hostile-upstream tests, fire once `fault_after_bytes`
of audio have arrived: `drop` (the TCP connection goes without a close
frame), `close` (a clean close, code 1000), `flood` (`flood_events` deltas
at once), `garbage` (a text message that is not JSON and a binary one),
`echo_auth` (an `error` event quoting the Authorization header it got, as a
careless server's error text might: the host must scrub the key).
With `api_key` set, a handshake without `Authorization: Bearer <api_key>`
is refused with HTTP 401; the first `refuse_first` handshakes get HTTP 503.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import json
import socket
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any, Literal

from websockets.exceptions import ConnectionClosed
from websockets.http11 import Request, Response
from websockets.sync.server import Server, ServerConnection, serve

Fault = Literal["drop", "close", "flood", "garbage", "echo_auth"]
BYTES_PER_MS = 48  # pcm16 mono at 24 kHz
REALTIME_PATH = "/v1/realtime?intent=transcription"
_DELTA = "conversation.item.input_audio_transcription.delta"
_COMPLETED = "conversation.item.input_audio_transcription.completed"


@dataclass
class AsrSession:
    """What one connection sent."""

    path: str
    headers: dict[str, str]
    updates: list[dict[str, Any]] = field(default_factory=list)
    audio_bytes: int = 0
    commits: int = 0
    clears: int = 0
    other_events: list[dict[str, Any]] = field(default_factory=list)
    # Set once the server has taken everything the client sent (its handler
    # returned): counts read before may still grow.
    ended: threading.Event = field(default_factory=threading.Event)


class ScriptedAsrServer:
    def __init__(self, phrases: Sequence[str] = ("hello from the scripted server",), *,
                 ms_per_phrase: int = 500, api_key: str | None = None,
                 fault: Fault | None = None, fault_after_bytes: int = 0,
                 flood_events: int = 10_000, refuse_first: int = 0) -> None:
        self.phrases = list(phrases)
        self.bytes_per_phrase = max(1, ms_per_phrase * BYTES_PER_MS)
        self.api_key = api_key
        self.fault = fault
        self.fault_after_bytes = fault_after_bytes
        self.flood_events = flood_events
        self.refuse_first = refuse_first  # handshakes answered 503 before one is accepted
        self.refused = 0
        self.sessions: list[AsrSession] = []
        self._lock = threading.Lock()
        self._server: Server | None = None
        self._thread: threading.Thread | None = None

    # ---- lifecycle -------------------------------------------------------

    def start(self) -> ScriptedAsrServer:
        # close_timeout: a client that exits right after its close frame can
        # leave websockets waiting out its 10 s default before the handler's
        # loop ends, and wait_ended() (the tests) with it; on loopback 1 s is plenty.
        self._server = serve(self._handle, "127.0.0.1", 0, process_request=self._check_key,
                             compression=None, max_size=4 << 20, close_timeout=1)
        self._thread = threading.Thread(target=self._server.serve_forever,
                                        name="spearpy-scripted-asr", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
        if self._thread is not None:
            self._thread.join(10)

    def __enter__(self) -> ScriptedAsrServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        assert self._server is not None, "start() the server first"
        return int(self._server.socket.getsockname()[1])

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.port}{REALTIME_PATH}"

    @property
    def audio_bytes(self) -> int:
        with self._lock:
            return sum(s.audio_bytes for s in self.sessions)

    # ---- one connection --------------------------------------------------

    def _check_key(self, connection: ServerConnection, request: Request) -> Response | None:
        with self._lock:
            if self.refused < self.refuse_first:
                self.refused += 1
                return connection.respond(HTTPStatus.SERVICE_UNAVAILABLE, "busy\n")
        if self.api_key is None:
            return None
        if request.headers.get("Authorization") != f"Bearer {self.api_key}":
            return connection.respond(HTTPStatus.UNAUTHORIZED, "invalid api key\n")
        return None

    def _handle(self, conn: ServerConnection) -> None:
        request = conn.request
        assert request is not None
        session = AsrSession(request.path, {k.lower(): v for k, v in request.headers.raw_items()})
        with self._lock:
            self.sessions.append(session)
        state = _Transcriber(self, conn, session)
        try:
            conn.send('{"type":"session.created","session":{}}')
            for message in conn:
                if not state.take(message):
                    return
        except (ConnectionClosed, OSError):
            return
        finally:
            session.ended.set()

    def wait_ended(self, timeout: float = 10.0) -> bool:
        """Whether every connection so far has ended and been fully taken in
        (a client's last messages are read after its process may have gone)."""
        with self._lock:
            sessions = list(self.sessions)
        return all(s.ended.wait(timeout) for s in sessions)


class _Transcriber:
    def __init__(self, server: ScriptedAsrServer, conn: ServerConnection,
                 session: AsrSession) -> None:
        self.server, self.conn, self.session = server, conn, session
        self.pending = 0  # audio bytes not transcribed yet
        self.next_phrase = 0
        self.fault_done = False

    def take(self, message: str | bytes) -> bool:
        """Answer one client message; False once the connection is gone."""
        try:
            event = json.loads(message)
        except ValueError:
            self.send({"type": "error", "error": {"message": "not JSON"}})
            return True
        kind = event.get("type") if isinstance(event, dict) else None
        server, session = self.server, self.session
        if kind == "session.update":
            with server._lock:
                session.updates.append(event)
            self.send({"type": "session.updated", "session": event.get("session")})
        elif kind == "input_audio_buffer.append":
            try:
                audio = base64.b64decode(event.get("audio", ""), validate=True)
            except (binascii.Error, ValueError):
                self.send({"type": "error", "error": {"message": "audio is not base64"}})
                return True
            with server._lock:
                session.audio_bytes += len(audio)
            self.pending += len(audio)
            if not self.fault_done and server.fault and \
                    session.audio_bytes >= server.fault_after_bytes:
                self.fault_done = True
                return self.misbehave()
            while self.pending >= server.bytes_per_phrase:
                self.pending -= server.bytes_per_phrase
                self.transcribe()
        elif kind == "input_audio_buffer.commit":
            with server._lock:
                session.commits += 1
            self.send({"type": "input_audio_buffer.committed"})
            if self.pending:
                self.pending = 0
                self.transcribe()
        elif kind == "input_audio_buffer.clear":
            with server._lock:
                session.clears += 1
            self.pending = 0
            self.send({"type": "input_audio_buffer.cleared"})
        else:
            with server._lock:
                session.other_events.append(event if isinstance(event, dict) else {})
        return True

    def transcribe(self) -> None:
        phrases = self.server.phrases
        if self.next_phrase >= len(phrases):
            return
        n = self.next_phrase
        phrase = phrases[n]
        self.next_phrase += 1
        item = f"item_{n:04d}"
        for word in phrase.split():
            self.send({"type": _DELTA, "item_id": item, "content_index": 0, "delta": word})
        self.send({"type": _COMPLETED, "item_id": item, "content_index": 0,
                   "transcript": phrase})

    def misbehave(self) -> bool:
        fault = self.server.fault
        if fault == "drop":
            sock = self.conn.socket
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()
            return False
        if fault == "close":
            self.conn.close(1000, "done")
            return False
        if fault == "flood":
            for i in range(self.server.flood_events):
                self.send({"type": _DELTA, "item_id": "flood", "content_index": 0,
                           "delta": f"flood{i}"})
            return True
        if fault == "echo_auth":
            auth = self.session.headers.get("authorization", "")
            self.send({"type": "error", "error": {"message": f"rejected credentials {auth}"}})
            return True
        self.conn.send("}{ this is not JSON")
        self.conn.send(b"\x00\xff\xfe binary")
        return True

    def send(self, event: dict[str, Any]) -> None:
        # The client may close while answers are still due: what it sent
        # before its close is still counted.
        with contextlib.suppress(ConnectionClosed):
            self.conn.send(json.dumps(event, separators=(",", ":")))

