"""A fixed-latency OpenAI-compatible endpoint: every POST is answered exactly
LATENCY_MS after it arrives.

One process of its own, an asyncio Protocol (no coroutine per request, no
stream objects) and HTTP/1.1 keep-alive: the server's CPU per request stays
a small fraction of the clients' it serves, so P4's baseline measures the
clients, not the server, on a machine whose cores they share.

With TOOL_ROUNDS the model asks for the `sum` tool until the request holds
that many tool messages after its last user message, then answers in text (the P2 loop, without the
scripted server's per-request JSON parsing); without it every answer is "ok".
`python -m bench.latency_server [LATENCY_MS [TOOL_ROUNDS]]` prints its base URL.
"""

from __future__ import annotations

import asyncio
import json
import selectors
import signal
import sys
from typing import Any

_TOOL_MESSAGE = b'"role":"tool"'
_USER_MESSAGE = b'"role":"user"'


def _completion(message: dict[str, Any], finish: str) -> bytes:
    body = json.dumps({
        "id": "chatcmpl-bench", "object": "chat.completion", "created": 1700000000,
        "model": "bench", "choices": [{"index": 0, "message": message,
                                       "finish_reason": finish}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    }, separators=(",", ":")).encode()
    return (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
            b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)


OK = _completion({"role": "assistant", "content": "ok"}, "stop")


def tool_reply(done: int, rounds: int) -> bytes:
    """The answer to a request that already holds `done` tool messages."""
    if done >= rounds:
        return _completion({"role": "assistant", "content": f"The sum is {done + 34}."}, "stop")
    call = {"id": f"call_{done}", "type": "function",
            "function": {"name": "sum", "arguments": json.dumps({"a": done, "b": 35})}}
    return _completion({"role": "assistant", "content": None, "tool_calls": [call]},
                       "tool_calls")


def _tool_answers(body: bytes) -> int:
    """Tool messages since the last user message (compact JSON, as spearpy sends)."""
    return body.count(_TOOL_MESSAGE, max(body.rfind(_USER_MESSAGE), 0))


class _Connection(asyncio.Protocol):
    def __init__(self, delay: float, rounds: int | None) -> None:
        self._delay = delay
        self._rounds = rounds
        self._buffer = b""
        self._transport: asyncio.Transport | None = None
        self._loop = asyncio.get_running_loop()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport

    def connection_lost(self, exc: Exception | None) -> None:
        self._transport = None

    def data_received(self, data: bytes) -> None:
        self._buffer += data
        while True:
            end = self._buffer.find(b"\r\n\r\n")
            if end < 0:
                return
            length = 0
            for line in self._buffer[:end].split(b"\r\n"):
                if line[:15].lower() == b"content-length:":
                    length = int(line[15:])
            if len(self._buffer) < end + 4 + length:
                return
            body = self._buffer[end + 4:end + 4 + length]
            self._buffer = self._buffer[end + 4 + length:]
            reply = OK if self._rounds is None else tool_reply(_tool_answers(body),
                                                               self._rounds)
            if self._delay > 0:
                self._loop.call_later(self._delay, self._write, reply)
            else:
                self._write(reply)

    def _write(self, reply: bytes) -> None:
        if self._transport is not None and not self._transport.is_closing():
            self._transport.write(reply)


async def main(latency_ms: float, rounds: int | None) -> None:
    delay = latency_ms / 1000.0
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: _Connection(delay, rounds), "127.0.0.1", 0,
                                      backlog=256)
    port = server.sockets[0].getsockname()[1]
    print(f"http://127.0.0.1:{port}/v1", flush=True)
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with server:
        await stop.wait()


def _loop() -> asyncio.AbstractEventLoop:
    """An event loop on select(2), not epoll: epoll_wait takes its timeout
    in whole milliseconds (Python rounds up), so a reply due in 20 ms went out
    0.35-0.45 ms late at the median and ~1 ms at p90 under P4's load; select
    takes microseconds: 0.09 ms at the median, 0.2-0.35 ms at p90 (measured
    in this server, the timer's firing against its due time). Late replies
    slow every P4 row alike, the ideal's included. A bench keeps far fewer
    than select's 1024 descriptors open."""
    return asyncio.SelectorEventLoop(selectors.SelectSelector())


if __name__ == "__main__":
    with asyncio.Runner(loop_factory=_loop) as runner:
        runner.run(main(float(sys.argv[1]) if len(sys.argv) > 1 else 20.0,
                        int(sys.argv[2]) if len(sys.argv) > 2 else None))
