"""The backends' lean HTTP/1.1 client (spearpy/backends/wire.py) against a raw
socket server that answers exactly the bytes each test scripts: chunked and
compressed bodies, informational answers, connections the server closes
(between requests, by header, by ending the body), malformed and oversized
answers, and a pool smaller than the number of threads posting."""

from __future__ import annotations

import contextlib
import datetime
import gzip
import ipaddress
import json
import os
import socket
import ssl
import threading
import time
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from spearpy.backends.base import CompletionRequest
from spearpy.backends.openai import OpenAIBackend
from spearpy.backends.wire import Wire
from spearpy.chat.protocol import CompletionResult
from spearpy.retry import RetryPolicy

BODY = json.dumps({"id": "r", "object": "chat.completion", "model": "m", "choices": [
    {"index": 0, "message": {"role": "assistant", "content": "hello ü"},
     "finish_reason": "stop"}]}).encode()

# (connection number, request number on it) -> the raw answer, and whether the
# server closes the connection after sending it.
Answer = Callable[[int, int], tuple[bytes, bool]]


def answer(body: bytes = BODY, *headers: str, status: str = "200 OK",
           length: bool = True) -> bytes:
    lines = [f"HTTP/1.1 {status}", "Content-Type: application/json", *headers]
    if length:
        lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def chunked(body: bytes, size: int = 7) -> bytes:
    parts = [b"%x;ext=1\r\n%s\r\n" % (len(body[i:i + size]), body[i:i + size])
             for i in range(0, len(body), size)]
    return b"".join(parts) + b"0\r\nX-Trailer: yes\r\n\r\n"


class RawServer:
    def __init__(self, respond: Answer) -> None:
        self.respond = respond
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}/v1"
        self.connections = 0
        self.requests: list[bytes] = []
        self.open_now = 0
        self.most_open = 0
        self.tls: ssl.SSLContext | None = None  # set before the first connection
        self.hold: threading.Event | None = None  # set: each answer is followed by silence
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            with self._lock:
                number = self.connections
                self.connections += 1
            threading.Thread(target=self._serve, args=(conn, number), daemon=True).start()

    def _serve(self, conn: socket.socket, number: int) -> None:
        if self.tls is not None:
            try:
                conn = self.tls.wrap_socket(conn, server_side=True)
            except OSError:
                conn.close()
                return
        with self._lock:
            self.open_now += 1
            self.most_open = max(self.most_open, self.open_now)
        buffer = b""
        try:
            for index in range(1000):
                while b"\r\n\r\n" not in buffer:
                    data = conn.recv(65536)
                    if not data:
                        return
                    buffer += data
                head, _, buffer = buffer.partition(b"\r\n\r\n")
                length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                              if line.lower().startswith(b"content-length:"))
                while len(buffer) < length:
                    buffer += conn.recv(65536)
                self.requests.append(head + b"\r\n\r\n" + buffer[:length])
                buffer = buffer[length:]
                raw, close = self.respond(number, index)
                conn.sendall(raw)
                if self.hold is not None:
                    self.hold.wait(10)
                if close:
                    return
        except OSError:
            return
        finally:
            conn.close()  # before the count drops: a test waits on the count for the close
            with self._lock:
                self.open_now -= 1

    def close(self) -> None:
        self.listener.close()


@pytest.fixture
def serve() -> Iterator[Callable[[Answer], RawServer]]:
    made: list[RawServer] = []

    def make(respond: Answer) -> RawServer:
        made.append(RawServer(respond))
        return made[-1]

    yield make
    for server in made:
        server.close()


def _backend(server: RawServer, *, max_connections: int = 64,
             base_url: str | None = None) -> OpenAIBackend:
    return OpenAIBackend(base_url=base_url or server.url, api_key_env="", request_timeout=5.0,
                         retry=RetryPolicy(max_retries=0), max_connections=max_connections)


def complete_once(server: RawServer) -> CompletionResult:
    """One completion asked of `server` by a backend of its own, closed after."""
    backend = _backend(server)
    try:
        return backend.complete(CompletionRequest(
            model="m", messages=[{"role": "user", "content": "hi"}]))
    finally:
        backend.close()


def _ask(backend: OpenAIBackend) -> tuple[str | None, str]:
    result = backend.complete(CompletionRequest(
        model="m", messages=[{"role": "user", "content": "hi"}]))
    if result.error is not None:
        return result.error.code, result.error.message
    assert result.body is not None
    return None, result.body["choices"][0]["message"]["content"]


@pytest.mark.parametrize("encoding", ["identity", "gzip", "deflate", "raw-deflate"])
def test_chunked_and_compressed_bodies_are_decoded(
        serve: Callable[[Answer], RawServer], encoding: str) -> None:
    if encoding == "gzip":
        body = gzip.compress(BODY)
    elif encoding == "deflate":
        body = zlib.compress(BODY)
    elif encoding == "raw-deflate":
        squeeze = zlib.compressobj(wbits=-zlib.MAX_WBITS)
        body = squeeze.compress(BODY) + squeeze.flush()
    else:
        body = BODY
    headers = ["Transfer-Encoding: chunked"]
    if encoding != "identity":
        headers.append(f"Content-Encoding: {encoding.removeprefix('raw-')}")
    server = serve(lambda c, r: (answer(chunked(body), *headers, length=False), False))
    backend = _backend(server)
    try:
        assert _ask(backend) == (None, "hello ü")
        assert _ask(backend) == (None, "hello ü")
    finally:
        backend.close()
    assert server.connections == 1  # the chunked answer was read to its end: reused


def test_the_request_is_one_well_formed_post(serve: Callable[[Answer], RawServer],
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("H1_TEST_KEY", "sk-h1")
    server = serve(lambda c, r: (answer(), False))
    backend = OpenAIBackend(base_url=server.url, api_key_env="H1_TEST_KEY")
    try:
        assert _ask(backend) == (None, "hello ü")
    finally:
        backend.close()
    head, _, body = server.requests[0].partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    assert lines[0] == "POST /v1/chat/completions HTTP/1.1"
    fields = dict(line.split(": ", 1) for line in lines[1:])
    assert fields["Host"] == server.url.split("/")[2]
    assert fields["Authorization"] == "Bearer sk-h1"
    assert fields["Connection"] == "keep-alive"
    assert int(fields["Content-Length"]) == len(body)
    assert json.loads(body)["messages"] == [{"role": "user", "content": "hi"}]


@pytest.mark.parametrize("how", ["server closes after answering", "Connection: close",
                                 "HTTP/1.0 answer", "body ends at close"])
def test_a_connection_the_server_ends_is_not_reused(
        serve: Callable[[Answer], RawServer], how: str) -> None:
    def respond(conn: int, index: int) -> tuple[bytes, bool]:
        if how == "Connection: close":
            return answer(BODY, "Connection: close"), True
        if how == "HTTP/1.0 answer":
            return answer(BODY).replace(b"HTTP/1.1", b"HTTP/1.0", 1), True
        if how == "body ends at close":
            return answer(BODY, length=False), True
        return answer(), True  # keep-alive promised, then closed while idle

    server = serve(respond)
    backend = _backend(server)
    try:
        for _ in range(3):
            assert _ask(backend) == (None, "hello ü")
            # The close has reached this side before the next request (a
            # close racing a request is a failed request, as with httpx).
            deadline = time.monotonic() + 10
            while server.open_now and time.monotonic() < deadline:
                time.sleep(0.005)
    finally:
        backend.close()
    assert server.connections == 3


def test_informational_answers_come_before_the_real_one(
        serve: Callable[[Answer], RawServer]) -> None:
    early = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </x>\r\n\r\n"
    server = serve(lambda c, r: (early + answer(), False))
    backend = _backend(server)
    try:
        assert _ask(backend) == (None, "hello ü")
    finally:
        backend.close()


@pytest.mark.parametrize(("raw", "code"), [
    (b"HTTP/1.1 2000 OK\r\n\r\n", "upstream_protocol_error"),
    (b"SMTP ready\r\n\r\n", "upstream_protocol_error"),
    (b"HTTP/1.1 200 OK\r\nno colon here\r\nContent-Length: 2\r\n\r\n{}", "upstream_protocol_error"),
    (b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n{}",
     "upstream_protocol_error"),
    (b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n{}", "upstream_protocol_error"),
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n{}", "upstream_protocol_error"),
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", "upstream_protocol_error"),
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n{}", "upstream_protocol_error"),
    (b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{}", "upstream_protocol_error"),
    (b"HTTP/1.1 200 OK\r\nX-Big: " + b"a" * 200_000 + b"\r\n\r\n", "upstream_protocol_error"),
    (b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: 4\r\n\r\nnope",
     "upstream_protocol_error"),
    (b"HTTP/1.1 101 Switching Protocols\r\n\r\n", "upstream_protocol_error"),
    (b"", "upstream_protocol_error"),
])
def test_broken_answers_are_protocol_errors(serve: Callable[[Answer], RawServer], raw: bytes,
                                            code: str) -> None:
    server = serve(lambda c, r: (raw, True))
    backend = _backend(server)
    try:
        assert _ask(backend)[0] == code
        assert _ask(backend)[0] == code  # and the pool is still usable
    finally:
        backend.close()


def test_trailers_without_end_are_a_protocol_error(
        serve: Callable[[Answer], RawServer]) -> None:
    # The connection stays open: without a bound the client would read
    # trailer lines until the server stopped sending or the deadline came.
    raw = (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n"
           + b"X-T: 12345678\r\n" * 20_000)
    backend = _backend(serve(lambda c, r: (raw, False)))
    try:
        code, message = _ask(backend)
        assert code == "upstream_protocol_error" and "trailers" in message
    finally:
        backend.close()


def test_nothing_listening_is_unreachable() -> None:
    with socket.create_server(("127.0.0.1", 0)) as probe:
        port = probe.getsockname()[1]
    backend = OpenAIBackend(base_url=f"http://127.0.0.1:{port}/v1", api_key_env="",
                            retry=RetryPolicy(max_retries=0))
    try:
        code, message = _ask(backend)
    finally:
        backend.close()
    assert code == "upstream_unreachable", message


def test_bytes_after_the_body_retire_the_connection(
        serve: Callable[[Answer], RawServer]) -> None:
    server = serve(lambda c, r: (answer() + b"HTTP/1.1 200 OK\r\n", False))
    backend = _backend(server)
    try:
        assert _ask(backend) == (None, "hello ü")
        assert _ask(backend) == (None, "hello ü")
    finally:
        backend.close()
    assert server.connections == 2


def test_a_small_pool_serves_more_threads_than_it_has_connections(
        serve: Callable[[Answer], RawServer]) -> None:
    server = serve(lambda c, r: (answer(), False))
    backend = _backend(server, max_connections=2)
    results: list[tuple[str | None, str]] = []

    def post() -> None:
        for _ in range(10):
            results.append(_ask(backend))

    threads = [threading.Thread(target=post) for _ in range(6)]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
    finally:
        backend.close()
    assert results == [(None, "hello ü")] * 60
    assert server.most_open <= 2


def test_a_pool_with_no_free_connection_times_out() -> None:
    wire = Wire("http://127.0.0.1:9/v1", {}, max_connections=1)
    assert wire._pool is not None
    assert wire._pool._slots.acquire(timeout=1)  # the only connection, taken
    with pytest.raises(httpx.PoolTimeout):
        wire.post(b"{}", 0.05)
    wire.close()


def test_https_and_odd_urls_choose_their_path() -> None:
    assert Wire("https://api.example.com/v1", {})._pool is not None
    assert Wire("http://user:pw@127.0.0.1:1/v1", {})._pool is None  # httpx: basic auth


def _certificates(directory: Path) -> tuple[Path, Path, Path]:
    """A CA and a certificate for 127.0.0.1 it signed: (ca.pem, cert.pem, key.pem)."""
    pytest.importorskip("cryptography")
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.UTC)
    span = (now - datetime.timedelta(days=1), now + datetime.timedelta(days=1))

    def certificate(name: str, key: ec.EllipticCurvePrivateKey, issuer: str,
                    signer: ec.EllipticCurvePrivateKey, ca: bool) -> x509.Certificate:
        builder = (x509.CertificateBuilder()
                   .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
                   .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, issuer)]))
                   .public_key(key.public_key()).serial_number(x509.random_serial_number())
                   .not_valid_before(span[0]).not_valid_after(span[1])
                   .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
        if not ca:
            builder = builder.add_extension(x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
        return builder.sign(signer, hashes.SHA256())

    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca = certificate("test ca", ca_key, "test ca", ca_key, ca=True)
    leaf = certificate("127.0.0.1", key, "test ca", ca_key, ca=False)
    paths = directory / "ca.pem", directory / "cert.pem", directory / "key.pem"
    paths[0].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths[1].write_bytes(leaf.public_bytes(serialization.Encoding.PEM))
    paths[2].write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                           serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return paths


@pytest.mark.parametrize("trusted", [True, False], ids=["trusted", "untrusted"])
def test_https_uses_the_trust_httpx_uses(serve: Callable[[Answer], RawServer], tmp_path: Path,
                                         monkeypatch: pytest.MonkeyPatch, trusted: bool) -> None:
    ca, cert, key = _certificates(tmp_path)
    if trusted:  # httpx's own context reads SSL_CERT_FILE; so must this client's
        monkeypatch.setenv("SSL_CERT_FILE", str(ca))
    server = serve(lambda c, r: (answer(), False))
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server.tls = context
    backend = _backend(server, base_url=server.url.replace("http://", "https://"))
    try:
        if trusted:
            assert _ask(backend) == (None, "hello ü")
            assert _ask(backend) == (None, "hello ü")
            assert server.connections == 1
        else:
            code, message = _ask(backend)
            assert code == "upstream_unreachable"
            assert "CERTIFICATE_VERIFY_FAILED" in message
    finally:
        backend.close()


@pytest.mark.parametrize("stall", ["no answer", "half a head", "half a body"])
def test_a_stalled_answer_times_out(serve: Callable[[Answer], RawServer], stall: str) -> None:
    raw = {"no answer": b"", "half a head": b"HTTP/1.1 200 OK\r\nContent-",
           "half a body": answer()[:-5]}[stall]
    server = serve(lambda c, r: (raw, True))
    release = server.hold = threading.Event()
    # Without a timeout the call would wait for the server: released at 15 s,
    # so that is a failure below, not a hang.
    unstall = threading.Timer(15, release.set)
    unstall.start()
    backend = OpenAIBackend(base_url=server.url, api_key_env="", request_timeout=0.2,
                            retry=RetryPolicy(max_retries=0))
    try:
        started = time.monotonic()
        code, message = _ask(backend)
        took = time.monotonic() - started
    finally:
        unstall.cancel()
        release.set()
        backend.close()
    assert code == "upstream_timeout", message
    # At least the 0.2 s timeout (load only lengthens it); 10 s tells a
    # timeout from the 15 s wait with room for a loaded 2-core machine.
    assert 0.15 < took < 10


def test_an_answer_sent_before_the_body_was_read_is_the_answer() -> None:
    # A server refusing a large body answers after its head and closes: the
    # client's write breaks, and the 413 is still what the backend reports.
    listener = socket.create_server(("127.0.0.1", 0))

    def refuse() -> None:
        with contextlib.suppress(OSError):
            conn, _ = listener.accept()
            head = b""
            while b"\r\n\r\n" not in head:
                head += conn.recv(65536)
            conn.sendall(b"HTTP/1.1 413 Payload Too Large\r\nConnection: close\r\n"
                         b"Content-Length: 38\r\n\r\n"
                         b'{"error":{"message":"body too large"}}')
            conn.shutdown(socket.SHUT_WR)
            conn.close()

    threading.Thread(target=refuse, daemon=True).start()
    backend = OpenAIBackend(base_url=f"http://127.0.0.1:{listener.getsockname()[1]}/v1",
                            api_key_env="", request_timeout=10.0,
                            retry=RetryPolicy(max_retries=0))
    try:
        result = backend.complete(CompletionRequest(
            model="m", messages=[{"role": "user", "content": "x" * (16 << 20)}]))
    finally:
        backend.close()
        listener.close()
    assert result.error is not None
    assert (result.error.code, result.error.status) == ("upstream_http_error", 413)
    assert "body too large" in result.error.message


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork here")
def test_a_forked_child_opens_its_own_connections(serve: Callable[[Answer], RawServer]) -> None:
    server = serve(lambda c, r: (answer(), False))
    backend = _backend(server)
    try:
        assert _ask(backend) == (None, "hello ü")  # a connection now idles in the pool
        child = os.fork()
        if child == 0:  # pragma: no cover (the child's exit status is the assertion)
            ok = _ask(backend) == (None, "hello ü")
            os._exit(0 if ok else 1)
        _, status = os.waitpid(child, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert _ask(backend) == (None, "hello ü")  # the parent's connection is intact
    finally:
        backend.close()
    assert server.connections == 2  # the parent's, reused, and the child's own


def test_connections_past_descriptor_1023_are_reused(serve: Callable[[Answer], RawServer]) -> None:
    resource = pytest.importorskip("resource")
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if max(soft, hard if hard != resource.RLIM_INFINITY else 1 << 20) < 1200:
        pytest.skip("fewer than 1200 descriptors allowed")
    if soft < 1200:
        resource.setrlimit(resource.RLIMIT_NOFILE, (1200, hard))
    server = serve(lambda c, r: (answer(), False))
    filler = [os.dup(0) for _ in range(1100)]  # the connection's descriptor lands past 1023
    backend = _backend(server)
    try:
        assert _ask(backend) == (None, "hello ü")
        assert _ask(backend) == (None, "hello ü")
    finally:
        backend.close()
        for fd in filler:
            os.close(fd)
        if soft < 1200:
            resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert server.connections == 1
