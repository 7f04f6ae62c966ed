"""A fixed-latency OpenAI-compatible endpoint for P4: every POST is answered
with the same small chat completion exactly LATENCY_MS after it arrives.

asyncio, one process, HTTP/1.1 keep-alive: the per-request cost of the
server stays far below that of the clients being measured, so the scenario
measures the host, not a thread-per-connection test server.
`python -m bench.latency_server [LATENCY_MS]` prints its base URL.
"""

from __future__ import annotations

import asyncio
import json
import signal
import sys

BODY = json.dumps({
    "id": "chatcmpl-bench", "object": "chat.completion", "created": 1700000000,
    "model": "bench", "choices": [{"index": 0, "message": {"role": "assistant",
                                                            "content": "ok"},
                                   "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
}, separators=(",", ":")).encode()
RESPONSE = (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
            b"Content-Length: " + str(len(BODY)).encode() + b"\r\n\r\n" + BODY)


async def _serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                 delay: float) -> None:
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n"):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":", 1)[1])
            if length:
                await reader.readexactly(length)
            await asyncio.sleep(delay)
            writer.write(RESPONSE)
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError):
        pass
    finally:
        writer.close()


async def main(latency_ms: float) -> None:
    delay = latency_ms / 1000.0
    server = await asyncio.start_server(lambda r, w: _serve(r, w, delay), "127.0.0.1", 0,
                                        backlog=256)
    port = server.sockets[0].getsockname()[1]
    print(f"http://127.0.0.1:{port}/v1", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with server:
        await stop.wait()


if __name__ == "__main__":
    asyncio.run(main(float(sys.argv[1]) if len(sys.argv) > 1 else 20.0))
