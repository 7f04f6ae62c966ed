"""One HTTP/1.1 answer read off a pooled connection (h1.py): the head at
once, the body's framing (Content-Length, chunked, until close) and its
content coding (gzip, deflate) as the reader pulls it. Malformed answers
raise httpx's exception types, as httpcore's would."""

from __future__ import annotations

import re
import zlib
from collections.abc import Iterator
from typing import TYPE_CHECKING

import httpx

if TYPE_CHECKING:
    from spearpy.backends.h1 import Connection, Pool

# What Response can decode, for the request's Accept-Encoding.
ACCEPT_ENCODING = "gzip, deflate"
# h11 (httpcore) refuses a response head or chunk header larger than this.
_MAX_HEAD = 100 * 1024
_READ_SIZE = 64 * 1024
# One inflated piece at most; httpbackend checks the size between pieces, so a
# small compressed bomb cannot fill the memory inside one chunk.
_MAX_PIECE = 1 << 20
_HEAD_END = re.compile(rb"\r?\n\r?\n")
_LINE = re.compile(rb"\r?\n")


class Response:
    """One answer read off a pooled connection: the head at once, the body as
    `iter_bytes` pulls it. `close` hands the connection back when the whole
    answer was read and the server keeps it open."""

    def __init__(self, pool: Pool, conn: Connection) -> None:
        self._pool: Pool | None = pool
        self._conn = conn
        self._buffer = bytearray()
        self._done = False  # the whole body read
        self.keep_alive = True
        self._raw_headers: list[tuple[bytes, bytes]] = []
        self._headers: httpx.Headers | None = None
        try:
            self.status_code = self._read_head()
        except BaseException:
            self.close()
            raise

    @property
    def headers(self) -> httpx.Headers:
        if self._headers is None:
            self._headers = httpx.Headers(self._raw_headers)
        return self._headers

    # ---- reading -----------------------------------------------------------

    def _recv(self) -> bytes:
        try:
            return self._conn.sock.recv(_READ_SIZE)
        except (TimeoutError, BlockingIOError) as exc:  # BlockingIOError: the kernel's timeout
            raise httpx.ReadTimeout(str(exc) or "read timed out") from exc
        except OSError as exc:
            raise httpx.ReadError(str(exc) or type(exc).__name__) from exc

    def _read_head(self) -> int:
        while True:  # informational (1xx) answers come before the real one
            buffer = self._buffer
            found = _HEAD_END.search(buffer)
            while found is None:
                if len(buffer) > _MAX_HEAD:
                    raise httpx.RemoteProtocolError("the response head is too large")
                data = self._recv()
                if not data:
                    raise httpx.RemoteProtocolError(
                        "Server disconnected without sending a response.")
                start = max(0, len(buffer) - 3)
                buffer += data
                found = _HEAD_END.search(buffer, start)
            lines = _LINE.split(bytes(buffer[:found.start()]))
            del buffer[:found.end()]
            status = self._status(lines[0])
            if 100 <= status < 200:
                if status == 101:
                    raise httpx.RemoteProtocolError("unexpected protocol switch (101)")
                continue
            self._parse_headers(lines[1:], status)
            return status

    def _status(self, line: bytes) -> int:
        version, _, rest = line.partition(b" ")
        code = rest[:3]
        if (not version.startswith(b"HTTP/1.") or len(code) != 3 or not code.isdigit()
                or rest[3:4] not in (b"", b" ")):
            raise httpx.RemoteProtocolError(f"malformed status line {line[:80]!r}")
        if version != b"HTTP/1.1":
            self.keep_alive = False  # HTTP/1.0 closes unless told otherwise: never risk it
        return int(code)

    def _parse_headers(self, lines: list[bytes], status: int) -> None:
        length: int | None = None
        chunked = False
        encoding = b""
        raw = self._raw_headers
        for line in lines:
            name, colon, value = line.partition(b":")
            if not colon or not name or name != name.strip() or line[:1] in (b" ", b"\t"):
                raise httpx.RemoteProtocolError(f"malformed header line {line[:80]!r}")
            value = value.strip(b" \t")
            raw.append((name, value))
            lowered = name.lower()
            if lowered == b"content-length":
                if not value.isdigit() or (length is not None and int(value) != length):
                    raise httpx.RemoteProtocolError("invalid Content-Length")
                length = int(value)
            elif lowered == b"transfer-encoding":
                if value.lower() != b"chunked":
                    raise httpx.RemoteProtocolError(f"unsupported Transfer-Encoding {value!r}")
                chunked = True
            elif lowered == b"connection":
                if b"close" in value.lower():
                    self.keep_alive = False
            elif lowered == b"content-encoding":
                encoding = value.lower()
        self._decoder = _decoder(encoding)
        if status in (204, 304):
            self._body: Iterator[bytes] = iter(())
        elif chunked:
            self._body = self._chunked()
        elif length is not None:
            self._body = self._sized(length)
        else:
            self.keep_alive = False  # the body ends when the server closes
            self._body = self._until_close()

    def _sized(self, length: int) -> Iterator[bytes]:
        buffer = self._buffer
        remaining = length
        while True:
            if buffer and remaining:
                piece = bytes(buffer[:remaining])
                del buffer[:remaining]
                remaining -= len(piece)
                yield piece
            if remaining <= 0:
                return
            data = self._recv()
            if not data:
                raise httpx.RemoteProtocolError(
                    "peer closed connection without sending complete message body: "
                    f"received {length - remaining} bytes, expected {length}")
            buffer += data

    def _until_close(self) -> Iterator[bytes]:
        if self._buffer:
            yield bytes(self._buffer)
            self._buffer.clear()
        while data := self._recv():
            yield data

    def _line(self) -> bytes:
        buffer = self._buffer
        while (end := buffer.find(b"\n")) < 0:
            if len(buffer) > _MAX_HEAD:
                raise httpx.RemoteProtocolError("a chunk header is too large")
            data = self._recv()
            if not data:
                raise httpx.RemoteProtocolError(
                    "peer closed connection without sending complete message body: "
                    "incomplete chunked read")
            buffer += data
        line = bytes(buffer[:end]).rstrip(b"\r")
        del buffer[:end + 1]
        return line

    def _chunked(self) -> Iterator[bytes]:
        while True:
            size_text = self._line().partition(b";")[0].strip()
            try:
                size = int(size_text, 16)
            except ValueError:
                raise httpx.RemoteProtocolError(
                    f"invalid chunk size {size_text[:20]!r}") from None
            if size < 0 or size_text[:1] in (b"-", b"+"):
                raise httpx.RemoteProtocolError("invalid chunk size")
            if size == 0:
                trailers = 0
                while line := self._line():  # trailers, up to the empty line
                    # Bounded like a head: a server dripping trailer lines
                    # forever would otherwise hold the run past every cap.
                    trailers += len(line) + 2
                    if trailers > _MAX_HEAD:
                        raise httpx.RemoteProtocolError("the trailers are too large")
                return
            yield from self._sized(size)
            if self._line():
                raise httpx.RemoteProtocolError("a chunk does not end with CRLF")

    def iter_bytes(self) -> Iterator[bytes]:
        decoder = self._decoder
        for piece in self._body:
            if decoder is None:
                if piece:
                    yield piece
                continue
            yield from decoder.pieces(piece)
        if decoder is not None and (tail := decoder.flush()):
            yield tail
        self._done = True

    def close(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.release(self._conn, self._done and self.keep_alive and not self._buffer)


def _decoder(encoding: bytes) -> _Inflate | None:
    if encoding in (b"gzip", b"x-gzip"):
        return _Inflate(zlib.MAX_WBITS | 16, raw_fallback=False)
    if encoding == b"deflate":
        return _Inflate(zlib.MAX_WBITS, raw_fallback=True)
    return None  # identity, or an encoding httpx would not decode either


class _Inflate:
    """gzip, or deflate: zlib-wrapped, or raw when the first bytes say so (as
    httpx). At most _MAX_PIECE bytes come out per piece."""

    def __init__(self, wbits: int, *, raw_fallback: bool) -> None:
        self._zlib = zlib.decompressobj(wbits)
        self._raw_fallback = raw_fallback

    def pieces(self, data: bytes) -> Iterator[bytes]:
        try:
            try:
                out = self._zlib.decompress(data, _MAX_PIECE)
            except zlib.error:
                if not self._raw_fallback:
                    raise
                self._zlib = zlib.decompressobj(-zlib.MAX_WBITS)
                out = self._zlib.decompress(data, _MAX_PIECE)
            self._raw_fallback = False  # decided by the first bytes
            while True:
                if out:
                    yield out
                tail = self._zlib.unconsumed_tail
                if not tail:
                    return
                out = self._zlib.decompress(tail, _MAX_PIECE)
        except zlib.error as exc:
            raise httpx.DecodingError(str(exc)) from exc

    def flush(self) -> bytes:
        try:
            return self._zlib.flush()
        except zlib.error as exc:
            raise httpx.DecodingError(str(exc)) from exc
