"""A loopback server speaking Ollama's documented API, for tests.

- `POST /api/chat`: the request is recorded and handed to `chat(request) ->
  Reply`; the reply is sent as one JSON object, or (when the request says
  `stream: true`, Ollama's default) as newline-delimited JSON: a line per
  word of the content, a line with the tool calls, a final `done: true` line
  with `done_reason` and the token counts. Errors are `{"error": "..."}`.
- `GET /api/tags` (installed models) and `GET /api/ps` (running models):
  `{"models": [{"name": ..., "model": ..., ...}]}` of `installed` / `serving`.
- `hostile[path] = fn(handler)` replaces any route with raw bytes of the
  test's choosing (garbage, an endless line, a huge list); `fn` writes to
  `handler.wfile` and may stop on a broken pipe.
"""

from __future__ import annotations

import contextlib
import json
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

STAMP = "2025-05-27T22:54:57.641643123Z"


@dataclass
class Reply:
    content: str = ""
    tool_calls: list[dict[str, Any]] = field(default_factory=list)  # Ollama's own shape
    done_reason: str = "stop"
    prompt_eval_count: int = 11
    eval_count: int = 7
    status: int = 200
    error: str | None = None  # sent as {"error": ...} with `status`


@dataclass
class Asked:
    method: str
    path: str
    headers: dict[str, str]
    body: Any


def tool_call(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """A tool call as Ollama sends it: no id, arguments as an object."""
    return {"function": {"name": name, "arguments": arguments}}


class OllamaServer:
    def __init__(self, chat: Callable[[dict[str, Any]], Reply] | None = None,
                 installed: list[str] | None = None, serving: list[str] | None = None) -> None:
        self.chat = chat or (lambda _request: Reply(content="hello"))
        self.installed = installed or []
        self.serving = serving or []
        self.hostile: dict[str, Callable[[BaseHTTPRequestHandler], None]] = {}
        self.requests: list[Asked] = []
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    def chats(self) -> list[dict[str, Any]]:
        return [r.body for r in self.requests if r.path == "/api/chat"]

    def __enter__(self) -> OllamaServer:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    # ---- answers ----------------------------------------------------------------

    def models(self, names: list[str]) -> bytes:
        return json.dumps({"models": [
            {"name": n, "model": n, "modified_at": STAMP, "size": 4_000_000_000,
             "digest": "0" * 64, "details": {"format": "gguf", "family": "llama"}}
            for n in names]}).encode()

    def chat_lines(self, model: str, reply: Reply) -> list[bytes]:
        """The NDJSON lines of a streamed reply."""
        def line(message: dict[str, Any], **extra: Any) -> bytes:
            return json.dumps({"model": model, "created_at": STAMP,
                               "message": {"role": "assistant", **message}, **extra}).encode()

        lines = [line({"content": w}, done=False) for w in re.findall(r"\S+\s*", reply.content)]
        if reply.tool_calls:
            lines.append(line({"content": "", "tool_calls": reply.tool_calls}, done=False))
        lines.append(line({"content": ""}, **self._final(reply)))
        return lines

    def chat_body(self, model: str, reply: Reply) -> bytes:
        message: dict[str, Any] = {"role": "assistant", "content": reply.content}
        if reply.tool_calls:
            message["tool_calls"] = reply.tool_calls
        return json.dumps({"model": model, "created_at": STAMP, "message": message,
                           **self._final(reply)}).encode()

    @staticmethod
    def _final(reply: Reply) -> dict[str, Any]:
        return {"done": True, "done_reason": reply.done_reason, "total_duration": 5_000_000,
                "load_duration": 1_000, "prompt_eval_count": reply.prompt_eval_count,
                "prompt_eval_duration": 1_000, "eval_count": reply.eval_count,
                "eval_duration": 1_000}


def _handler(server: OllamaServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *_args: Any) -> None:
            pass

        def do_GET(self) -> None:
            self._answer(None)

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            raw = self.rfile.read(length)
            try:
                body = json.loads(raw)
            except ValueError:
                body = raw.decode("utf-8", "replace")
            self._answer(body)

        def _answer(self, body: Any) -> None:
            server.requests.append(Asked(self.command, self.path, dict(self.headers), body))
            hostile = server.hostile.get(self.path)
            if hostile is not None:
                self.close_connection = True
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                    hostile(self)
                return
            if self.command == "GET" and self.path == "/api/tags":
                self._send(200, server.models(server.installed))
            elif self.command == "GET" and self.path == "/api/ps":
                self._send(200, server.models(server.serving))
            elif self.command == "POST" and self.path == "/api/chat" and isinstance(body, dict):
                self._chat(body)
            else:
                self._send(404, b'{"error":"404 page not found"}')

        def _chat(self, request: dict[str, Any]) -> None:
            reply = server.chat(request)
            model = str(request.get("model", ""))
            if reply.error is not None:
                self._send(reply.status, json.dumps({"error": reply.error}).encode())
            elif request.get("stream", True):  # Ollama streams unless told not to
                self.close_connection = True
                self.send_response(reply.status)
                self.send_header("Content-Type", "application/x-ndjson")
                self.send_header("Connection", "close")
                self.end_headers()
                for line in server.chat_lines(model, reply):
                    self.wfile.write(line + b"\n")
                    self.wfile.flush()
            else:
                self._send(reply.status, server.chat_body(model, reply))

        def _send(self, status: int, data: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Type", "application/json; charset=utf-8")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    return Handler
