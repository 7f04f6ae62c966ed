"""`spearpy stream URL`: talk to a served run's user stream from a terminal.

URL is either a run on `spearpy serve` (http://HOST:PORT/v1/runs/ID, or
SPEAR's http://HOST:PORT/api/v1/executions/ID), for which a stream session
is asked first, or the `ws_url` such a session gave (ws://...?token=...).
Each line of stdin is one DATA frame on --stream-id; the data of every frame
the guest sends back goes to stdout. At the end of input the client waits
until the guest has been quiet for --linger seconds, then hangs up (the
guest sees its session close); it exits when the run ends too.
"""

from __future__ import annotations

import asyncio
import re
import sys
import threading
from urllib.parse import urlsplit

import click

from spearpy._term import one_line
from spearpy.serve.config import TOKEN_ENV

_RUN_PATH = re.compile(r"(.*?)/(?:v1/runs|api/v1/executions)/([^/]+)/?")  # full matches
SUBPROTOCOL = "spear.stream.v1"
# What a service says (an error's detail, a close reason, the URL it gave)
# is printed cut to this many characters, its control characters escaped:
# as `spearpy mcp list/call` print what a server said.
SAID_MAX_CHARS = 2000


def _said(text: str) -> str:
    return one_line(text, SAID_MAX_CHARS)


class _StreamFailed(click.ClickException):
    """The service refused or dropped the connection: exit 1 with its reason."""


@click.command()
@click.argument("url")
@click.option("--stream-id", type=click.IntRange(0, 0xFFFFFFFF), default=1, show_default=True,
              help="the stream to send on")
@click.option("--token", "service_token", envvar=TOKEN_ENV,
              help=f"the service's bearer token, for the session and the upgrade "
                   f"[env {TOKEN_ENV}]")
@click.option("--linger", type=float, default=2.0, show_default=True,
              help="seconds of quiet from the guest after the end of input before hanging up")
def stream(url: str, stream_id: int, service_token: str | None, linger: float) -> None:
    """Send stdin lines to a served run's user stream; print what it sends back."""
    try:
        import websockets  # noqa: F401  (a dev extra; say so rather than fail on import)
    except ImportError:
        raise click.ClickException("spearpy stream needs the websockets package "
                                   "(pip install websockets)") from None
    ws_url = url if url.startswith(("ws://", "wss://")) else _session_url(url, service_token)
    try:
        asyncio.run(_talk(ws_url, stream_id, linger, service_token))
    except KeyboardInterrupt:
        sys.exit(130)


def _session_url(url: str, service_token: str | None) -> str:
    import httpx

    match = _RUN_PATH.fullmatch(urlsplit(url).path)
    if not url.startswith(("http://", "https://")) or match is None:
        raise click.BadParameter("give a run's URL (http://HOST:PORT/v1/runs/ID) or a stream "
                                 "session's ws:// URL", param_hint="URL")
    parts = urlsplit(url)
    endpoint = (f"{parts.scheme}://{parts.netloc}{match.group(1)}/api/v1/executions/"
                f"{match.group(2)}/streams/session")
    headers = {"Authorization": f"Bearer {service_token}"} if service_token else {}
    try:
        response = httpx.post(endpoint, json={}, headers=headers, timeout=30, trust_env=False)
    except httpx.HTTPError as exc:
        raise _StreamFailed(_said(f"cannot reach {endpoint}: {exc}")) from None
    if response.status_code != 200:
        raise _StreamFailed(_said(f"{endpoint}: {response.status_code} "
                                  f"{_detail(response.text)}"))
    try:
        ws_url = response.json()["ws_url"]
    except (ValueError, TypeError, KeyError):
        ws_url = None
    if not isinstance(ws_url, str) or not ws_url.startswith(("ws://", "wss://")):
        raise _StreamFailed(_said(f"{endpoint}: the answer holds no ws:// or wss:// ws_url: "
                                  f"{response.text}"))
    return ws_url


def _detail(body: str | bytes) -> str:
    import json

    try:
        return str(json.loads(body).get("detail", body))
    except (ValueError, AttributeError):
        return body.decode(errors="replace") if isinstance(body, bytes) else body


async def _talk(ws_url: str, stream_id: int, linger: float, service_token: str | None
                ) -> None:
    from websockets.asyncio.client import connect
    from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidStatus
    from websockets.typing import Subprotocol

    from spearpy.streams import ssf

    try:
        # A service with a token wants it on the upgrade too; the stream token
        # rides in ws_url's query.
        headers = {"Authorization": f"Bearer {service_token}"} if service_token else None
        ws = await connect(ws_url, subprotocols=[Subprotocol(SUBPROTOCOL)], compression=None,
                           proxy=None, max_size=None, additional_headers=headers)
    except InvalidStatus as exc:
        raise _StreamFailed(_said(f"refused: {exc.response.status_code} "
                                  f"{_detail(bytes(exc.response.body or b''))}")) from None
    except InvalidHandshake as exc:  # an answer that is no HTTP response, or too big
        raise _StreamFailed(_said(f"{ws_url.split('?')[0]}: not a WebSocket handshake: "
                                  f"{exc}")) from None
    except OSError as exc:
        raise _StreamFailed(_said(f"cannot connect to {ws_url.split('?')[0]}: {exc}")) from None
    heard = asyncio.Event()  # set at every frame from the guest

    async def receive() -> None:
        async for raw in ws:
            if isinstance(raw, bytes):
                sys.stdout.buffer.write(ssf.decode(raw).data)
                sys.stdout.buffer.flush()
                heard.set()

    async def send() -> None:
        seq = 0
        lines = _stdin_lines(asyncio.get_running_loop())
        while (line := await lines.get()) is not None:
            seq += 1
            await ws.send(ssf.build(stream_id, seq, line))
        while True:  # end of input: hang up once the guest has been quiet a while
            heard.clear()
            try:
                await asyncio.wait_for(heard.wait(), linger)
            except TimeoutError:
                break
        await ws.close()

    tasks = [asyncio.create_task(receive()), asyncio.create_task(send())]
    try:
        done, _pending = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        for task in done:
            task.result()
    except ConnectionClosed:
        pass
    finally:
        for task in tasks:
            task.cancel()
        await ws.close()
    if ws.close_code not in (None, 1000, 1005):
        raise _StreamFailed(_said(f"the service closed the stream: {ws.close_code} "
                                  f"{ws.close_reason or ''}"))
    if ws.close_reason:
        click.echo(_said(f"spearpy stream: {ws.close_reason}"), err=True)


def _stdin_lines(loop: asyncio.AbstractEventLoop) -> asyncio.Queue[bytes | None]:
    """stdin's lines, then None. Read on a daemon thread: a terminal's pending
    read must not keep the process alive once the run has ended."""
    queue: asyncio.Queue[bytes | None] = asyncio.Queue(maxsize=64)

    def read() -> None:
        try:
            for line in iter(sys.stdin.buffer.readline, b""):
                asyncio.run_coroutine_threadsafe(queue.put(line), loop).result()
            asyncio.run_coroutine_threadsafe(queue.put(None), loop).result()
        except (RuntimeError, OSError, ValueError):
            return  # the loop is gone (the stream ended) or stdin failed

    threading.Thread(target=read, name="spearpy-stream-stdin", daemon=True).start()
    return queue
