"""One WebSocket client session: binary messages in as SSF frames, the
guest's frames out, each a single binary message.

Two tasks. The reader hands each frame to the run's hub and, while the
stream's queue is full, stops receiving: uvicorn reads no more from the
socket until the next `receive`, so TCP pushes back on the client. The
writer takes the guest's frames and sends them; `send` waits while the
socket's buffer is full, so a client that does not read holds the guest at
-EAGAIN instead of the service buffering for it. Whichever ends first ends
the session.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Final

from starlette.websockets import WebSocket

import spearpy.streams.ssf as ssf
from spearpy.streams.session import Session, SessionClosed

SUBPROTOCOL: Final = "spear.stream.v1"
# Close codes (RFC 6455): what the reason text says, in a number.
NORMAL: Final = 1000
POLICY: Final = 1008  # a malformed frame, one stream too many
TOO_BIG: Final = 1009  # a frame over the limit
_MAX_REASON: Final = 123  # bytes a close frame's reason may hold


async def serve_session(websocket: WebSocket, session: Session) -> None:
    reader = asyncio.create_task(_read(websocket, session))
    writer = asyncio.create_task(_write(websocket, session))
    try:
        await asyncio.wait({reader, writer}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in (reader, writer):
            task.cancel()
        await asyncio.gather(reader, writer, return_exceptions=True)
        session.close("client closed" if session.open and not session.hub.ended
                      else session.reason or "run ended")


async def _read(websocket: WebSocket, session: Session) -> None:
    while True:
        message = await websocket.receive()
        if message["type"] == "websocket.disconnect":
            return
        frame = message.get("bytes")
        if frame is None:
            continue  # text messages carry no frames (SPEAR ignores them too)
        try:
            if not await session.apush(frame):
                return
        except ssf.SsfError as exc:
            reason = f"malformed SSF frame: {exc}"
            session.reject(reason, len(frame))
            code = TOO_BIG if len(frame) > session.hub.limits.max_frame_bytes else POLICY
            await _close(websocket, code, reason)
            return
        except SessionClosed:
            return


async def _write(websocket: WebSocket, session: Session) -> None:
    while True:
        frame = await session.apop()
        if frame is not None:
            await websocket.send_bytes(frame)
            continue
        if session.finished:
            # The guest's last frames are out: say why the stream ends.
            await _close(websocket, NORMAL, "run ended" if session.hub.ended
                         else session.reason or "session closed")
            return


async def _close(websocket: WebSocket, code: int, reason: str) -> None:
    text = reason.encode()[:_MAX_REASON].decode("utf-8", "ignore")
    with contextlib.suppress(Exception):  # the client may be gone already
        await websocket.close(code, text)
