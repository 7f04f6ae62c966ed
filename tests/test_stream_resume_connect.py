"""A resumed stream run whose client attaches before the replay reaches the
stream's open (docs/durable.md, hostcalls/streams_golive.py): the guest
sees the connects a run without a crash sees, and no second STREAM_CONNECTED
for a stream its journal says it already had.

The client's first frame on a stream connects it (StreamHub.route), and a
control fd opened while a session is attached learns of the streams it has
connected (StreamHub.open_ctl): both queue a STREAM_CONNECTED for the guest.
During a replay the guest's control reads are the journal's, so what was
queued is still there when the run goes live; for a stream the replay
reopened, the guest read its connect long ago (c_stream_chat then opens it
a second time: a second user_stream_open in the journal)."""

from __future__ import annotations

import base64
import json
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from spearpy.durable import JournalSpec
from spearpy.host import Host
from spearpy.outcome import RunResult
from spearpy.streams import StreamClient, StreamHub
from spearpy.streams.channel import CtlQueue
from spearpy.streams.client import UserStream
from spearpy.streams.limits import CTL_SESSION_CLOSED, CTL_STREAM_CONNECTED
from spearpy.testing import ScriptedServer
from tests.test_durable_streams_audio import (
    CHAT,
    HANG_GUARD,
    QUESTIONS,
    SCRIPT,
    WAIT_S,
    _converse,
    _cut,
    _steps,
)

OPEN = "user_streams.user_stream_open"
CTL_READ = "user_streams.user_stream_ctl_read"


@dataclass
class World:
    host: Host
    lines: list[str]  # the journal of the run without a crash


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    where = tmp_path_factory.mktemp("chat")
    (where / "script.json").write_text(json.dumps(SCRIPT))
    with ScriptedServer(str(where / "script.json")) as server, \
            Host(cache_dir=None, base_url=server.base_url, model="m", api_key_env="") as host:
        path = where / "chat.jsonl"
        handle = host.start(CHAT, ["--summary"], streams=True, journal=JournalSpec(path),
                            limits=HANG_GUARD)
        result = _converse(handle, [q for q, _a in QUESTIONS], len(QUESTIONS))
        assert (result.outcome, result.exit_code) == ("exited", 0), result.message
        yield World(host, path.read_text().splitlines())


def _opens(lines: list[str]) -> list[int]:
    """The stream id of each user_stream_open the guest made."""
    return [s["request"]["args"][0] for s in _steps(lines)  # type: ignore[index]
            if s["kind"] == "hostcall" and s["request"]["call"] == OPEN]  # type: ignore[index]


def _connects(lines: list[str]) -> list[int]:
    """The stream id of each STREAM_CONNECTED the guest read from its control fd."""
    seen = []
    for step in _steps(lines):
        if step["kind"] != "hostcall" or step["request"]["call"] != CTL_READ:  # type: ignore[index]
            continue
        answer = step["answer"]
        if answer["rc"] != 8:  # type: ignore[index]
            continue
        event = base64.b64decode(answer["writes"][0][1])  # type: ignore[index]
        stream_id, kind = struct.unpack("<II", event)
        if kind == CTL_STREAM_CONNECTED:
            seen.append(stream_id)
    return seen


def _cut_at_open(world: World, where: Path) -> Path:
    """The journal up to (and with) the guest's open of stream 1, after the
    connect it read: a crash right there."""
    opened = next(i for i, s in enumerate(_steps(world.lines)) if s["kind"] == "hostcall"
                  and s["request"]["call"] == OPEN)  # type: ignore[index]
    return _cut(world.lines, opened, where)


def _talk(world: World, path: Path, hub: StreamHub, stream: UserStream,
          client: StreamClient, first_sent: bool) -> RunResult:
    """Resume the cut run on `hub`; the client asks every question (the
    guest read none before the cut) and closes once all are answered."""
    handle = world.host.start(CHAT, ["--summary"], streams=hub, journal=JournalSpec(path),
                              limits=HANG_GUARD)
    for question, _a in QUESTIONS[1 if first_sent else 0:]:
        stream.send(question.encode(), timeout=WAIT_S)
    finals = 0
    while finals < len(QUESTIONS):
        frame = stream.recv(timeout=WAIT_S)
        assert frame is not None, f"{finals} of {len(QUESTIONS)} answers came"
        finals += frame.meta_json() == {"final": True}
    client.close()
    return handle.result(timeout=WAIT_S)


def _check(world: World, path: Path, result: RunResult) -> None:
    assert (result.outcome, result.exit_code) == ("exited", 0), result.message
    assert result.stdout == b"session closed: 3 questions answered\n"
    resumed = path.read_text().splitlines()
    assert _connects(world.lines) == [1] and _opens(world.lines) == [1]
    assert _connects(resumed) == _connects(world.lines)
    assert _opens(resumed) == _opens(world.lines)


def test_a_client_that_sent_before_the_resume_is_not_connected_twice(
        world: World, tmp_path: Path) -> None:
    """Its first frame connected stream 1 before the replay opened the
    control fd: the replayed open learns of it (StreamHub.open_ctl)."""
    path = _cut_at_open(world, tmp_path)
    hub = StreamHub()
    client = StreamClient(hub)
    stream = client.open_stream(1)
    stream.send(QUESTIONS[0][0].encode(), timeout=WAIT_S)
    _check(world, path, _talk(world, path, hub, stream, client, first_sent=True))


class _SendsAtCtlOpen(StreamHub):
    """A hub whose client sends its first frame the moment the replay opens
    the guest's control fd: between that open and the stream's (route)."""

    stream: UserStream | None = None

    def open_ctl(self) -> CtlQueue:
        queue = super().open_ctl()
        stream, self.stream = self.stream, None
        if stream is not None:
            stream.send(QUESTIONS[0][0].encode(), timeout=WAIT_S)
        return queue


def test_a_client_that_connects_during_the_replay_is_not_connected_twice(
        world: World, tmp_path: Path) -> None:
    path = _cut_at_open(world, tmp_path)
    hub = _SendsAtCtlOpen()
    client = StreamClient(hub)
    stream = hub.stream = client.open_stream(1)  # attached; stream 1 not connected yet
    _check(world, path, _talk(world, path, hub, stream, client, first_sent=True))


def test_a_stream_the_journal_never_opened_still_connects(world: World, tmp_path: Path) -> None:
    """Stream 2 connects during the replay, which never opens it: the guest
    hears of it once live, as it would have without the crash."""
    path = _cut_at_open(world, tmp_path)
    hub = StreamHub()
    client = StreamClient(hub)
    other = client.open_stream(2)
    other.send(QUESTIONS[1][0].encode(), timeout=WAIT_S)
    handle = world.host.start(CHAT, ["--summary"], streams=hub, journal=JournalSpec(path),
                              limits=HANG_GUARD)
    frame = other.recv(timeout=WAIT_S)
    assert frame is not None  # the guest opened stream 2 and answers on it
    while frame is not None and frame.meta_json() != {"final": True}:
        frame = other.recv(timeout=WAIT_S)
    assert frame is not None
    client.close()
    result = handle.result(timeout=WAIT_S)
    assert (result.outcome, result.exit_code) == ("exited", 0), result.message
    resumed = path.read_text().splitlines()
    assert _connects(resumed) == [1, 2] and _opens(resumed) == [1, 2]


def test_a_later_session_s_connect_during_the_replay_stays() -> None:
    """A session attached during the replay and ended before the run went
    live (its SESSION_CLOSED queued), and the next one connected the stream
    the replay then reopened. Once live the guest reads that SESSION_CLOSED
    and closes its streams, as after any session: the next session's
    connect is news it must get. The connect the first session queued is
    the one the journal already holds. The hub as the replay drives it
    (streams_golive: the control fd, then the stream, then the go-live)."""
    hub = StreamHub()
    ctl = hub.open_ctl()  # the replay reopens the guest's control fd
    first = StreamClient(hub)
    first.open_stream(1).send(b"q", timeout=WAIT_S)
    first.close()
    second = StreamClient(hub)
    second.open_stream(1).send(b"q", timeout=WAIT_S)
    reopened = hub.channel(1, resumed=True)  # the replay reaches the stream's open
    assert reopened is not None
    hub.went_live([reopened])  # the guest holds it as it goes live
    assert list(ctl.events) == [(0, CTL_SESSION_CLOSED), (1, CTL_STREAM_CONNECTED)]
    second.close()


ECHO = str(Path(CHAT).with_name("c_user_stream_echo.wasm"))
READ = "user_streams.user_stream_read"


def test_a_stream_the_guest_closed_before_the_cut_connects_again(tmp_path: Path) -> None:
    """The journal's client closed stream 1 and the guest closed its fd
    (c_user_stream_echo, on EPOLLHUP), then used stream 2. The client of
    the resumed run sends on stream 1 before the replay reaches its open:
    the replay opens it again and the guest closes it again, so at go-live
    the guest has no stream 1 and its connect is news (the guest opens it
    and echoes), not a second one of a stream it holds."""
    path = tmp_path / "echo.jsonl"
    with Host(cache_dir=None) as host:
        handle = host.start(ECHO, ["--summary"], streams=True, journal=JournalSpec(path),
                            limits=HANG_GUARD)
        for stream_id, data in ((1, b"a"), (2, b"b")):
            stream = handle.open_stream(stream_id)
            stream.send(data, timeout=WAIT_S)
            echoed = stream.recv(timeout=WAIT_S)
            assert echoed is not None and echoed.data == data
            if stream_id == 1:
                stream.close()
        handle.close_streams()
        live = handle.result(timeout=WAIT_S)
        assert (live.outcome, live.exit_code) == ("exited", 0), live.message
        lines = path.read_text().splitlines()
        steps = _steps(lines)
        fds = {s["request"]["args"][0]: s["answer"]["rc"] for s in steps  # type: ignore[index]
               if s["kind"] == "hostcall" and s["request"]["call"] == OPEN}  # type: ignore[index]
        # Cut once the guest read stream 2's frame: it closed stream 1's fd
        # before (the same epoll round as stream 2's connect, or an earlier one).
        k = next(i for i, s in enumerate(steps) if s["kind"] == "hostcall"
                 and s["request"]["call"] == READ  # type: ignore[index]
                 and s["request"]["args"][0] == fds[2])  # type: ignore[index]
        hub = StreamHub()
        client = StreamClient(hub)
        again = client.open_stream(1)
        again.send(b"again", timeout=WAIT_S)
        cut = _cut(lines, k, tmp_path)
        handle = host.start(ECHO, ["--summary"], streams=hub, journal=JournalSpec(cut),
                            limits=HANG_GUARD)
        echoed = again.recv(timeout=WAIT_S)
        client.close()
        resumed = handle.result(timeout=WAIT_S)
    assert echoed is not None and echoed.data == b"again"
    assert (resumed.outcome, resumed.exit_code) == ("exited", 0), resumed.message
    assert _opens(cut.read_text().splitlines()) == [1, 2, 1]  # the last live, after the cut
