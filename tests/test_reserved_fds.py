"""A tool attacking the response fd of the send that runs it (issue 14, item 5).

cchat_send takes its response fd before the loop runs (a full fd table is
refused before anything goes upstream), so its number is predictable. A tool
used to be able to close it, which ended the send with an AssertionError in
the host (EIO to the guest) and lost the response. While its send runs the fd
is pending: close is EAGAIN (as for the session that is sending), recv and
metrics are EAGAIN (nothing to read yet), status says ChatResponse and not
ready, epoll may watch it and sees it become readable when the send ends.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterator
from typing import Any

import pytest

from spearpy import abi
from spearpy.fds import ChatResponse, ChatResponseFd, ChatSessionFd, EpollFd, FdTable
from spearpy.host import Host
from spearpy.hostcalls import chat
from spearpy.testing import ScriptedServer
from tests.probe import Probe, tool_schema, wat_module
from tests.test_hostile_upstream import assert_valid_transcript

GUEST = wat_module("reserved_fds.wat")
TOOLS = ["close", "recv", "metrics", "status", "epoll", "epoll_close", "fd_metrics"]
# The order the model calls them in: close first, so every later attack
# meets the fd after the close attempt (which used to remove it).
CALLED = ["close", "recv", "metrics", "status", "epoll", "fd_metrics", "epoll_close"]
RESULTS, EPOLL_FD, EPOLL_READY, STATUS = 0x100, 0x144, 0x148, 0x2000


def _script() -> dict[str, Any]:
    calls = [{"name": name, "arguments": {}} for name in CALLED]
    return {"rules": [{"when": {"last_role": "user"}, "reply": {"tool_calls": calls}}],
            "default": {"content": "final: {{last_tool}}"}}


@pytest.fixture(scope="module")
def upstream() -> Iterator[ScriptedServer]:
    with ScriptedServer(_script()) as server:
        yield server


@pytest.fixture
def guest(upstream: ScriptedServer) -> Iterator[Probe]:
    host = Host(base_url=upstream.base_url, model="m", max_retries=0, cache_dir=None,
                timeout=30)
    p = Probe(host, GUEST)
    yield p
    p.close()
    host.close()


def _session(p: Probe) -> tuple[int, int]:
    """A session with the attacking tools, and the fd its next send will return."""
    fd = int(p.hc("cchat_create"))
    for index, name in enumerate(TOOLS):
        assert p.write_fn(fd, index, tool_schema(name)) == 0
    assert p.write_msg(fd, "user", "attack") == 0
    target = fd + 1  # numbers increase by one and nothing else is open
    p.call("set_target", target)
    return fd, target


def _rc(p: Probe, index: int) -> int:
    return int(struct.unpack("<i", p.get(RESULTS + 4 * index, 4))[0])


@pytest.mark.usefixtures("no_host_bugs")
def test_a_tool_cannot_close_or_read_its_own_sends_response(guest: Probe) -> None:
    p = guest
    fd, target = _session(p)
    rfd = int(p.hc("cchat_send", fd, abi.SEND_AUTO_TOOL_CALL))
    # The send ended normally and returned the fd the tools attacked.
    assert rfd == target
    body = p.recv_json(rfd)
    assert body["choices"][0]["message"]["content"] == "final: ok"
    session = p.run.fds.get(fd, ChatSessionFd).session
    assert_valid_transcript(list(session.messages))
    assert [m["content"] for m in session.messages if m["role"] == "tool"] == ["ok"] * 7

    assert _rc(p, TOOLS.index("close")) == abi.EAGAIN
    assert _rc(p, TOOLS.index("recv")) == abi.EAGAIN
    assert _rc(p, TOOLS.index("metrics")) == abi.EAGAIN
    assert _rc(p, TOOLS.index("fd_metrics")) == abi.EAGAIN
    assert _rc(p, TOOLS.index("epoll_close")) == abi.EBADF  # not an epoll fd
    length = _rc(p, TOOLS.index("status"))
    assert length > 0
    status = json.loads(p.get(STATUS, length))
    assert status == {"kind": "ChatResponse", "flags": [], "poll_mask": [], "closed": False}
    # epoll may watch the pending fd: not ready during the send...
    assert _rc(p, TOOLS.index("epoll")) == 0
    assert int(struct.unpack("<i", p.get(EPOLL_READY, 4))[0]) == 0
    # ...and readable once the send has filled it.
    ep = int(struct.unpack("<i", p.get(EPOLL_FD, 4))[0])
    p.u32(p.A, 64)
    assert p.hc("spear_epoll_wait", ep, p.B, p.A, 0) == 1
    assert struct.unpack("<ii", p.get(p.B, 8)) == (rfd, abi.EPOLLIN)
    # After the send it is an ordinary response fd.
    p.u32(p.A, 4096)
    assert p.hc("cchat_ctl", rfd, abi.CTL_GET_METRICS, p.B, p.A) == 2  # {}
    assert p.hc("cchat_close", rfd) == 0
    assert p.hc("cchat_close", rfd) == 0  # already closed
    assert p.recv(rfd)[0] == abi.EBADF


def test_a_send_that_fails_inside_the_host_gives_its_fd_back(
        guest: Probe, monkeypatch: pytest.MonkeyPatch, host_bugs: list[str]) -> None:
    p = guest
    fd, target = _session(p)
    open_before = len(p.run.fds)

    def broken(*_args: Any) -> Any:
        raise RuntimeError("host bug")

    monkeypatch.setattr(chat, "run_send", broken)
    assert p.hc("cchat_send", fd, 0) == abi.EIO
    assert host_bugs == ["spear.cchat_send: RuntimeError: host bug"]
    # No pending entry is left holding a slot of the table; the number is
    # spent like any closed fd's.
    assert len(p.run.fds) == open_before
    assert p.run.fds.lookup(target) is None
    assert p.hc("cchat_close", target) == 0
    assert p.run.fds.get(fd, ChatSessionFd).session is not None


def test_pending_entries_in_the_table() -> None:
    table = FdTable(max_open=2)
    slot = ChatResponseFd()
    fd = table.open(slot)
    assert slot.pending and table.get(fd, ChatResponseFd) is slot
    assert table.get(fd, EpollFd) is None
    assert table.close(fd) == abi.EAGAIN
    assert table.readiness(fd) == 0 and slot.metrics() == abi.EAGAIN
    assert table.open(ChatResponseFd()) >= 0
    assert table.open(ChatResponseFd()) == abi.EMFILE  # pending fds count
    slot.fill(ChatResponse(b"body", {"iterations": 1}, False))
    assert table.readiness(fd) == abi.EPOLLIN and slot.metrics() == {"iterations": 1}
    assert table.close(fd) == 0
    table.discard(fd)  # gone already: no-op
    assert table.close(fd) == 0
