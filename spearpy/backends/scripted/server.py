"""A real OpenAI-compatible HTTP server on loopback that answers from a Script.

Standard-library `http.server` speaking HTTP/1.1 with keep-alive, one thread
per connection. The server tracks every open connection so `stop()` can
close them and join their threads: an idle keep-alive connection would
otherwise leave a thread blocked in recv() for as long as the client lives.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hmac
import json
import logging
import socket
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from spearpy import _json
from spearpy.backends.scripted.dialect_names import dialect as _dialect
from spearpy.backends.scripted.dialects import Dialect
from spearpy.backends.scripted.faults import WIRE_FAULTS
from spearpy.backends.scripted.reply import CREATED, JSONDict, ScriptedReply, ScriptError, failure
from spearpy.backends.scripted.script import Script, ScriptSource
from spearpy.backends.scripted.streamed import openai_events

log = logging.getLogger("spearpy.scripted")

COMPLETIONS_PATH = "/v1/chat/completions"
MODELS_PATH = "/v1/models"
# No real chat request comes near this; it only stops a runaway client.
MAX_BODY_BYTES = 64 * 1024 * 1024
# How long stop() waits for one busy handler (e.g. a slow reply callable).
JOIN_TIMEOUT_S = 10.0


class _BadBody(Exception):
    pass


@dataclass(frozen=True, slots=True)
class RecordedRequest:
    method: str
    path: str  # as sent, query string included
    headers: dict[str, str]  # names lower-cased; repeated headers joined with ", "
    body: JSONDict | None  # the JSON object sent, None if absent, not JSON or not an object


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    # The default backlog of 5 refuses connections when 32 guests start at once.
    request_queue_size = 128

    def __init__(self, owner: ScriptedServer, address: tuple[str, int]) -> None:
        self.owner = owner
        self.track_lock = threading.Lock()
        self.conns: set[socket.socket] = set()
        self.threads: set[threading.Thread] = set()
        self.closing = False
        self.stopping = threading.Event()
        super().__init__(address, _Handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        with self.track_lock:
            if self.closing:
                self.shutdown_request(request)
                return
            thread = threading.Thread(
                target=self._serve_connection,
                args=(request, client_address),
                name=f"spearpy-scripted-conn-{client_address[1]}",
                daemon=True,
            )
            self.conns.add(request)
            self.threads.add(thread)
        thread.start()

    def _serve_connection(self, request: socket.socket, client_address: Any) -> None:
        try:
            self.finish_request(request, client_address)
        except Exception:
            self.handle_error(request, client_address)
        finally:
            self.shutdown_request(request)
            with self.track_lock:
                self.conns.discard(request)
                self.threads.discard(threading.current_thread())

    def handle_error(self, request: Any, client_address: Any) -> None:
        # Clients dropping connections is routine in fault tests; keep stderr quiet.
        log.debug("scripted server: connection from %s failed", client_address, exc_info=True)

    def close_everything(self) -> None:
        with self.track_lock:
            self.closing = True
            conns = list(self.conns)
            threads = list(self.threads)
        for conn in conns:
            with contextlib.suppress(OSError):  # already closed by its handler
                conn.shutdown(socket.SHUT_RDWR)  # wakes a handler blocked in recv()
        for thread in threads:
            thread.join(JOIN_TIMEOUT_S)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "spearpy-scripted/0.1"
    sys_version = ""
    server: _HTTPServer
    # Headers and body leave in separate writes; with Nagle on, the body
    # waits for the client's delayed ACK (~40 ms on Linux) on every request.
    disable_nagle_algorithm = True

    def do_GET(self) -> None:
        self._dispatch()

    do_POST = do_PUT = do_PATCH = do_DELETE = do_GET

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("scripted server: " + format, *args)

    # ---- request side ----------------------------------------------------------

    def _read_body(self) -> bytes:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            return self._read_chunked()
        try:
            length = int(self.headers.get("Content-Length", "0"))
        except ValueError as exc:
            raise _BadBody("invalid Content-Length") from exc
        if not 0 <= length <= MAX_BODY_BYTES:
            raise _BadBody(f"Content-Length must be within 0..{MAX_BODY_BYTES}")
        return self.rfile.read(length)

    def _read_chunked(self) -> bytes:
        parts: list[bytes] = []
        total = 0
        while True:
            line = self.rfile.readline(1024)
            try:
                size = int(line.split(b";")[0].strip(), 16)
            except ValueError as exc:
                raise _BadBody("invalid chunk size") from exc
            total += size
            if size < 0 or total > MAX_BODY_BYTES:
                raise _BadBody("chunked body too large")
            if size == 0:
                while self.rfile.readline(1024) not in (b"\r\n", b"\n", b""):
                    pass  # trailers: ignored
                return b"".join(parts)
            parts.append(self.rfile.read(size))
            self.rfile.readline(1024)

    def _dispatch(self) -> None:
        owner = self.server.owner
        try:
            raw = self._read_body()
        except _BadBody as exc:
            self.close_connection = True  # framing is lost; cannot find the next request
            self._send(failure(str(exc), status=400))
            return
        body, json_error = _parse_json(raw)
        headers: dict[str, str] = {}
        for name, value in self.headers.items():
            key = name.lower()
            headers[key] = f"{headers[key]}, {value}" if key in headers else value
        owner._record(RecordedRequest(self.command, self.path, headers, body))
        self._send(self._answer(owner, body, json_error))

    def _answer(
        self, owner: ScriptedServer, body: JSONDict | None, json_error: str | None
    ) -> ScriptedReply:
        lowered = {k.lower(): v for k, v in self.headers.items()}
        speaks = owner.dialect
        if owner.api_key is not None:
            denied = (speaks.unauthorized(lowered, owner.api_key) if speaks is not None
                      else None if _authorized(self.headers, owner.api_key) else failure(
                "Incorrect API key provided (the scripted server expects a Bearer token).",
                status=401,
            ))
            if denied is not None:
                return denied
        path = self.path.split("?", 1)[0].rstrip("/")
        if speaks is not None and json_error is None:
            handled = speaks.answer(self.command, path, lowered, body,
                                    lambda request: _respond(owner, request))
            if handled is not None:
                return handled
        if path == COMPLETIONS_PATH and self.command == "POST":
            if json_error is not None:
                problem = f"We could not parse the JSON body of your request: {json_error}"
                return failure(problem, status=400)
            reply = _respond(owner, body)
            if body is not None and body.get("stream") is True and reply.body is not None \
                    and reply.status == 200 and reply.fault is None:
                options = body.get("stream_options")
                usage = isinstance(options, dict) and options.get("include_usage") is True
                reply = dataclasses.replace(reply, events=openai_events(reply.body, usage))
            return reply
        if path == MODELS_PATH and self.command == "GET":
            return ScriptedReply(body=_models_body(owner.script))
        if path in (COMPLETIONS_PATH, MODELS_PATH):
            return failure(f"Method {self.command} not allowed on {path}", status=405)
        return failure(f"Invalid URL ({self.command} {self.path})", status=404)

    # ---- reply side ------------------------------------------------------------

    def _send(self, reply: ScriptedReply) -> None:
        if reply.delay_ms > 0 and self.server.stopping.wait(reply.delay_ms / 1000):
            # Shutting down mid-delay: leave without an answer rather than hold stop() up.
            self.close_connection = True
            return
        payload = reply.payload()
        headers = {"Content-Type": reply.content_type()}
        lowered = {k.lower(): k for k in headers}
        for name, value in reply.headers.items():
            headers.pop(lowered.get(name.lower(), name), None)
            headers[name] = value
        if reply.events is not None:
            self._send_events(reply, headers)
            return
        writer = WIRE_FAULTS.get(reply.fault or "")
        if writer is not None:
            self.close_connection = True
            writer(self.connection, reply.status, list(headers.items()), payload)
            return
        self.send_response(reply.status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)


    def _send_events(self, reply: ScriptedReply, headers: dict[str, str]) -> None:
        """A streamed answer: one HTTP chunk per event, paced, flushed as it goes."""
        self.send_response(reply.status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for i, event in enumerate(reply.events or ()):
            if i and reply.stream_delay_ms and \
                    self.server.stopping.wait(reply.stream_delay_ms / 1000):
                self.close_connection = True
                return
            self.wfile.write(b"%x\r\n%s\r\n" % (len(event), event))
            self.wfile.flush()
        self.wfile.write(b"0\r\n\r\n")


def _respond(owner: ScriptedServer, body: JSONDict | None) -> ScriptedReply:
    try:
        return owner.script.respond(body)
    except ScriptError as exc:
        return failure(str(exc), code="scripted_error")
    except Exception as exc:  # a bug in user code must not kill the connection
        log.exception("scripted server: script failed")
        return failure(f"scripted model failed: {exc!r}", code="scripted_error")


def _parse_json(raw: bytes) -> tuple[JSONDict | None, str | None]:
    if not raw:
        return None, "the body is empty"
    try:
        value = _json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        return None, str(exc)
    # Script.respond explains why a non-object body is refused.
    return (value, None) if isinstance(value, dict) else (None, None)


def _authorized(headers: Any, api_key: str) -> bool:
    got = headers.get("Authorization", "")
    return hmac.compare_digest(got.encode(), f"Bearer {api_key}".encode())


def _models_body(script: Script) -> JSONDict:
    return {
        "object": "list",
        "data": [
            {"id": m, "object": "model", "created": CREATED, "owned_by": "spearpy-scripted"}
            for m in script.models
        ],
    }


class ScriptedServer:
    """Serve `script` on http://host:port/v1 until stop(); a context manager too.

    `dialect` (a name or a spearpy.backends.scripted.dialects.Dialect) makes it behave
    like another server: "anthropic", "ollama", "llamacpp", "vllm", "mistral".
    """

    def __init__(
        self,
        script: ScriptSource,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        api_key: str | None = None,
        dialect: str | Dialect | None = None,
    ) -> None:
        self.script = Script.load(script)
        self.dialect = None if dialect is None else _dialect(dialect)
        self.host = host
        self.api_key = api_key
        self._port = port
        self._lock = threading.Lock()
        self._requests: list[RecordedRequest] = []
        self._httpd: _HTTPServer | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> ScriptedServer:
        if self._httpd is not None:
            raise RuntimeError("ScriptedServer is already running")
        httpd = _HTTPServer(self, (self.host, self._port))
        self._httpd = httpd
        self._thread = threading.Thread(
            target=httpd.serve_forever,
            kwargs={"poll_interval": 0.05},
            name="spearpy-scripted-accept",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop accepting, close every connection and join every thread. Idempotent."""
        httpd, thread = self._httpd, self._thread
        if httpd is None or thread is None:
            return
        httpd.stopping.set()
        httpd.shutdown()
        httpd.server_close()
        httpd.close_everything()
        thread.join()
        self._httpd = self._thread = None

    def __enter__(self) -> ScriptedServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        if self._httpd is None:
            raise RuntimeError("ScriptedServer is not running; call start() first")
        return int(self._httpd.server_address[1])

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    @property
    def requests(self) -> list[RecordedRequest]:
        with self._lock:
            return list(self._requests)

    def clear_requests(self) -> None:
        with self._lock:
            self._requests.clear()

    def _record(self, request: RecordedRequest) -> None:
        with self._lock:
            self._requests.append(request)


def serve_script_forever(
    path: ScriptSource,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    api_key: str | None = None,
) -> None:
    """Serve a script until interrupted, printing the base URL first (for standalone use)."""
    with ScriptedServer(path, host=host, port=port, api_key=api_key) as server:
        print(server.base_url, flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            threading.Event().wait()
