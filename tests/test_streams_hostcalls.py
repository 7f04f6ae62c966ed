"""The user_stream_* hostcalls against a real GuestRun and a client session
on its hub: SPEAR's return codes, whole frames, -ENOSPC keeping the frame,
readiness through spear_epoll_*, and a blocked wait woken by the client."""

from __future__ import annotations

import struct
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import wasmtime

from spearpy import abi
from spearpy.context import RunOptions
from spearpy.observe.events import Event
from spearpy.streams import StreamHub, StreamLimits, ssf
from spearpy.streams.limits import ENOTCONN, EPIPE
from spearpy.testing.instance import LiveInstance

_IMPORTS = [("user_stream_open", 2), ("user_stream_read", 3), ("user_stream_write", 3),
            ("user_stream_close", 1), ("user_stream_ctl_open", 0), ("user_stream_ctl_read", 3),
            ("spear_epoll_create", 0), ("spear_epoll_ctl", 4), ("spear_epoll_wait", 4),
            ("spear_fd_ctl", 4), ("cchat_create", 0)]


def _probe_wat() -> str:
    lines = ["(module"]
    for name, n in _IMPORTS:
        params = " ".join(["i32"] * n)
        lines.append(f'  (import "spear" "{name}" (func ${name} (param {params}) (result i32)))')
    lines.append('  (memory (export "memory") 4)')
    for name, n in _IMPORTS:
        params = " ".join(["i32"] * n)
        gets = " ".join(f"(local.get {i})" for i in range(n))
        lines.append(f'  (func (export "p_{name}") (param {params}) (result i32) '
                     f"(call ${name} {gets}))")
    lines.append(")")
    return "\n".join(lines)


WASM = bytes(wasmtime.wat2wasm(_probe_wat()))
A, B, C = 1024, 4096, 65536  # scratch: a length word, event records, frame buffers


class StreamProbe(LiveInstance):
    def hc(self, name: str, *args: int) -> int:
        return int(self.call(f"p_{name}", *args))

    def put(self, ptr: int, data: bytes) -> int:
        self.run.memory.write(ptr, data)
        return len(data)

    def u32(self, ptr: int, value: int | None = None) -> int:
        if value is not None:
            self.run.memory.write(ptr, struct.pack("<I", value))
        return int(struct.unpack("<I", self.run.memory.read(ptr, 4))[0])

    def read(self, fd: int, capacity: int = 60000) -> tuple[int, bytes]:
        self.u32(A, capacity)
        rc = self.hc("user_stream_read", fd, C, A)
        return rc, self.run.memory.read(C, rc) if rc > 0 else b""

    def write(self, fd: int, frame: bytes) -> int:
        return self.hc("user_stream_write", fd, C, self.put(C, frame))

    def ctl_events(self, fd: int) -> list[tuple[int, int]]:
        events: list[tuple[int, int]] = []
        while True:
            self.u32(A, 8)
            rc = self.hc("user_stream_ctl_read", fd, B, A)
            if rc == abi.EAGAIN:
                return events
            assert rc == 8, rc
            events.append(struct.unpack("<II", self.run.memory.read(B, 8)))


@pytest.fixture
def probe(make_host: Any) -> Iterator[Any]:
    made: list[StreamProbe] = []

    def make(hub: StreamHub | None = None, **options: Any) -> StreamProbe:
        host = make_host(base_url="http://127.0.0.1:9/v1")
        p = StreamProbe(host, host.load(WASM),
                        RunOptions(capture_output=True, streams=hub, **options))
        made.append(p)
        return p

    yield make
    for p in made:
        p.close()


def frame(stream_id: int, seq: int, data: bytes, meta: bytes = b"") -> bytes:
    return ssf.build(stream_id, seq, data, meta)


def test_without_a_hub_opens_are_enotconn(probe: Any) -> None:
    p = probe(None)
    assert p.hc("user_stream_ctl_open") == ENOTCONN == -107
    assert p.hc("user_stream_open", 1, 3) == ENOTCONN
    assert p.hc("user_stream_read", 1000, C, A) == abi.EBADF
    assert p.hc("user_stream_close", 1000) == abi.EBADF


def test_connect_read_echo_and_session_close(probe: Any) -> None:
    hub = StreamHub()
    p = probe(hub)
    ctl = p.hc("user_stream_ctl_open")
    assert ctl >= abi.FIRST_FD
    assert p.ctl_events(ctl) == []
    session = hub.connect("api")
    sent = frame(7, 42, b"hello", b'{"k":1}')
    assert session.push(sent)
    assert p.ctl_events(ctl) == [(7, 1)]  # stream connected, once
    assert session.push(frame(7, 43, b"again"))
    assert p.ctl_events(ctl) == []
    fd = p.hc("user_stream_open", 7, 3)
    rc, got = p.read(fd)
    assert (rc, got) == (len(sent), sent)  # the whole frame, as the client sent it
    assert p.write(fd, got) == 0  # SPEAR's success value
    assert session.pop() == sent
    assert p.read(fd)[1] == frame(7, 43, b"again")
    assert p.read(fd)[0] == abi.EAGAIN
    session.close()
    assert p.ctl_events(ctl) == [(0, 2)]  # session closed
    assert p.read(fd)[0] == EPIPE
    assert p.write(fd, frame(7, 1, b"late")) == EPIPE
    assert p.hc("user_stream_close", fd) == 0
    assert p.hc("user_stream_close", fd) == 0  # already closed
    assert p.hc("user_stream_close", ctl) == 0


def test_enospc_writes_the_length_back_and_keeps_the_frame(probe: Any) -> None:
    hub = StreamHub()
    p = probe(hub)
    session = hub.connect()
    sent = frame(1, 1, b"x" * 100)
    session.push(sent)
    fd = p.hc("user_stream_open", 1, 1)
    assert p.read(fd, capacity=40) == (abi.ENOSPC, b"")
    assert p.u32(A) == len(sent)
    assert p.read(fd, capacity=len(sent)) == (len(sent), sent)
    ctl = p.hc("user_stream_ctl_open")
    p.u32(A, 7)
    assert p.hc("user_stream_ctl_read", ctl, B, A) == abi.ENOSPC
    assert p.u32(A) == 8
    assert p.ctl_events(ctl) == [(1, 1)]  # kept through the -ENOSPC


def test_direction_and_kind_errors_follow_spear(probe: Any) -> None:
    hub = StreamHub()
    p = probe(hub)
    session = hub.connect()
    session.push(frame(3, 1, b"in"))
    fd_in, fd_out = p.hc("user_stream_open", 3, 1), p.hc("user_stream_open", 3, 2)
    assert p.write(fd_in, frame(3, 1, b"x")) == abi.EINVAL  # an IN fd refuses writes
    assert p.read(fd_out)[0] == abi.EINVAL  # an OUT fd refuses reads
    assert p.hc("user_stream_open", 3, 0) == abi.EINVAL
    assert p.hc("user_stream_open", 3, 4) == abi.EINVAL
    assert p.write(fd_out, frame(4, 1, b"other stream")) == abi.EINVAL
    assert p.write(fd_out, b"SPST" + bytes(28)) == abi.EINVAL  # version 0
    bad = bytearray(frame(3, 1, b"abc"))
    bad[28] = 9  # data_len no longer matches
    assert p.write(fd_out, bytes(bad)) == abi.EINVAL
    assert p.write(fd_out, b"short") == abi.EINVAL
    assert p.hc("user_stream_write", fd_out, 60000 * 10, 40) == abi.EFAULT
    chat = p.hc("cchat_create")
    assert p.read(chat)[0] == abi.EBADF
    assert p.hc("user_stream_close", chat) == abi.EBADF
    ctl = p.hc("user_stream_ctl_open")
    assert p.read(ctl)[0] == abi.EBADF
    assert p.hc("user_stream_ctl_read", fd_in, B, A) == abi.EBADF
    # Before the client uses a stream, the guest cannot write to it.
    early = p.hc("user_stream_open", 9, 2)
    assert p.write(early, frame(9, 1, b"x")) == ENOTCONN


def test_header_extension_bytes_pass_through(probe: Any) -> None:
    hub = StreamHub()
    p = probe(hub)
    session = hub.connect()
    sent = ssf.build(5, 9, b"data", b"{}", extension=b"\x01\x02\x03\x04")
    session.push(sent)
    fd = p.hc("user_stream_open", 5, 3)
    assert p.read(fd)[1] == sent
    assert p.write(fd, sent) == 0
    assert ssf.decode(session.pop() or b"").extension == b"\x01\x02\x03\x04"


def test_outbound_backpressure_is_eagain_then_epollout(probe: Any) -> None:
    events: list[Event] = []
    hub = StreamHub(StreamLimits(max_queue_frames=2, max_queue_bytes=1 << 20))
    p = probe(hub, sinks=[events.append])
    session = hub.connect()
    session.push(frame(1, 1, b"go"))
    fd = p.hc("user_stream_open", 1, 3)
    ep = p.hc("spear_epoll_create")
    assert p.hc("spear_epoll_ctl", ep, abi.EPOLL_CTL_ADD, fd, abi.EPOLLOUT) == 0
    assert p.write(fd, frame(1, 1, b"a")) == 0
    assert p.write(fd, frame(1, 2, b"b")) == 0
    assert p.write(fd, frame(1, 3, b"c")) == abi.EAGAIN
    p.u32(A, 64)
    assert p.hc("spear_epoll_wait", ep, B, A, 0) == 0  # not writable while full
    assert session.pop() is not None
    p.u32(A, 64)
    assert p.hc("spear_epoll_wait", ep, B, A, 0) == 1
    assert struct.unpack("<ii", p.run.memory.read(B, 8)) == (fd, abi.EPOLLOUT)
    assert p.write(fd, frame(1, 3, b"c")) == 0
    kinds = [e.kind for e in events]
    assert kinds.count("stream_backpressure") == 1
    assert p.hc("user_stream_close", fd) == 0
    close = next(e for e in events if e.kind == "stream_close")
    assert close.data["eagain_writes"] == 1 and close.data["frames_written"] == 3


def test_inbound_queue_full_refuses_the_client_until_the_guest_reads(probe: Any) -> None:
    hub = StreamHub(StreamLimits(max_queue_frames=2))
    p = probe(hub)
    session = hub.connect()
    assert session.push(frame(1, 1, b"1")) and session.push(frame(1, 2, b"2"))
    assert not session.push(frame(1, 3, b"3"))  # held back, not buffered
    assert session.paused == 1
    fd = p.hc("user_stream_open", 1, 1)
    pusher = threading.Thread(target=session.push_wait, args=(frame(1, 3, b"3"), 10))
    pusher.start()
    time.sleep(0.05)
    assert pusher.is_alive()
    assert p.read(fd)[0] > 0  # room: the waiting push goes through
    pusher.join(5)
    assert not pusher.is_alive()
    assert [ssf.decode(p.read(fd)[1]).seq for _ in range(2)] == [2, 3]


def test_a_blocked_epoll_wait_wakes_on_connect_frame_and_hangup(probe: Any) -> None:
    hub = StreamHub()
    p = probe(hub)
    ctl = p.hc("user_stream_ctl_open")
    ep = p.hc("spear_epoll_create")
    assert p.hc("spear_epoll_ctl", ep, abi.EPOLL_CTL_ADD, ctl, abi.EPOLLIN) == 0
    holder: dict[str, Any] = {}

    def client() -> None:
        time.sleep(0.2)
        holder["session"] = session = hub.connect()
        session.push(frame(2, 1, b"hi"))

    threading.Thread(target=client).start()
    started = time.monotonic()
    p.u32(A, 64)
    assert p.hc("spear_epoll_wait", ep, B, A, -1) == 1  # infinite: a client may come
    assert time.monotonic() - started >= 0.15
    assert p.ctl_events(ctl) == [(2, 1)]
    fd = p.hc("user_stream_open", 2, 3)
    assert p.hc("spear_epoll_ctl", ep, abi.EPOLL_CTL_ADD, fd, abi.EPOLLIN) == 0
    assert p.read(fd)[0] > 0
    threading.Timer(0.2, holder["session"].close).start()
    p.u32(A, 64)
    assert p.hc("spear_epoll_wait", ep, B, A, 5000) == 2
    records = struct.unpack("<iiii", p.run.memory.read(B, 16))
    assert records == (ctl, abi.EPOLLIN, fd, abi.EPOLLHUP)  # HUP is always reported


def test_a_late_ctl_fd_learns_what_already_happened(probe: Any) -> None:
    hub = StreamHub(max_sessions=1)
    p = probe(hub)
    session = hub.connect()
    session.push(frame(4, 1, b"x"))
    ctl = p.hc("user_stream_ctl_open")
    assert p.ctl_events(ctl) == [(4, 1)]
    session.close()
    late = p.hc("user_stream_ctl_open")
    assert p.ctl_events(late) == [(0, 2)]
    assert p.ctl_events(ctl) == [(0, 2)]
    # No session can come any more: an infinite wait returns instead of hanging.
    ep = p.hc("spear_epoll_create")
    p.hc("spear_epoll_ctl", ep, abi.EPOLL_CTL_ADD, ctl, abi.EPOLLIN)
    p.u32(A, 64)
    assert p.hc("spear_epoll_wait", ep, B, A, -1) == 0


def test_status_and_metrics_come_from_the_fd(probe: Any) -> None:
    hub = StreamHub()
    p = probe(hub)
    session = hub.connect()
    session.push(frame(1, 1, b"abc"))
    fd = p.hc("user_stream_open", 1, 3)
    p.u32(A, 4096)
    n = p.hc("spear_fd_ctl", fd, abi.FD_CTL_GET_STATUS, B, A)
    status = p.run.memory.read(B, n)
    assert b'"kind":"UserStream"' in status and b'"EPOLLIN","EPOLLOUT"' in status
    p.u32(A, 4096)
    n = p.hc("spear_fd_ctl", fd, abi.FD_CTL_GET_METRICS, B, A)
    assert b'"inbound_frames":1' in p.run.memory.read(B, n)


def test_a_second_session_waits_for_the_first_and_starts_fresh(probe: Any) -> None:
    hub = StreamHub()
    p = probe(hub)
    first = hub.connect()
    with pytest.raises(RuntimeError, match="already attached"):
        hub.connect()
    first.push(frame(1, 1, b"old"))
    old_fd = p.hc("user_stream_open", 1, 3)
    first.close()
    second = hub.connect()
    second.push(frame(1, 1, b"new"))
    assert p.read(old_fd)[1] == frame(1, 1, b"old")  # what was sent stays readable
    assert p.read(old_fd)[0] == EPIPE  # then the old stream is over
    new_fd = p.hc("user_stream_open", 1, 3)
    assert p.read(new_fd)[1] == frame(1, 1, b"new")


def test_stream_ids_past_2_31_arrive_as_negative_i32(probe: Any) -> None:
    hub = StreamHub()
    p = probe(hub)
    session = hub.connect()
    session.push(frame(0xFFFFFFF0, 1, b"big id"))
    fd = p.hc("user_stream_open", 0xFFFFFFF0 - (1 << 32), 3)
    assert p.read(fd)[1] == frame(0xFFFFFFF0, 1, b"big id")
