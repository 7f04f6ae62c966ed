"""Hostile tools, allocators and hostcall arguments, inside one guest instance.

Tools (tests/wat/hostile_tools.wat) that trap, recurse, spin, sleep, lie
about lengths, scribble, exit or re-enter their own session, and allocators
that return NULL, wild or aliased blocks, trap or spin: each fails only its
call while a well-behaved agent runs on another thread of the same Host. Then
a bad pointer or length for every pointer parameter of every hostcall, JSON
nested deeper than Python parses, and a host bug a guest can repeat.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import wasmtime

from spearpy import abi, context
from spearpy.fds import ChatSessionFd
from spearpy.host import Host
from spearpy.instance import GuestRun
from spearpy.testing import ScriptedServer
from tests.probe import Probe, tool_schema, wat_module
from tests.test_hostile_guest import HANG_GUARD_S, neighbour_running, routed_script
from tests.test_hostile_upstream import assert_valid_transcript

# A hostcall that hits a host bug answers EIO and logs; here it fails the test.
pytestmark = pytest.mark.usefixtures("no_host_bugs")
LOG_HOST_BUG = GuestRun.note_host_bug  # before no_host_bugs replaces it
ROOT = Path(__file__).resolve().parents[1]
TOOLS = wat_module("hostile_tools.wat")


@pytest.fixture(scope="module")
def tool_upstream() -> Iterator[ScriptedServer]:
    with ScriptedServer(routed_script()) as server:
        yield server


ECHO, SCRIBBLE, OOB, RECURSE, SLEEPER, QUITTER, REENTER, CLOSER, MOVER, LEN_MAX, ASK_MAX, \
    SPIN, NEGATIVE_LEN, CLOBBER = range(14)
TOOL_NAMES = ["echo", "scribble", "oob", "recurse", "sleeper", "quitter", "reenter", "closer",
              "mover", "len_max", "ask_max", "spin", "negative_len", "clobber"]
# What the model reads back for the hostile call (the echo after it must always work).
TOOL_CASES = [
    ("scribble", "tool_exec_failed", "claimed"),
    ("oob", "tool_exec_failed", "memory out of bounds"),
    ("recurse", "tool_exec_failed", "call stack exhausted"),
    ("sleeper", "tool_exec_failed", "deadline"),
    ("quitter", "tool_exec_failed", "exit 3"),
    ("reenter", None, chr(ord("A") - abi.EAGAIN)),  # a send on its own session: EAGAIN
    ("closer", None, chr(ord("A") - abi.EAGAIN)),  # closing its own session: EAGAIN
    ("mover", None, '{"x":1}'),  # grew (and possibly moved) memory mid-call
    ("len_max", "tool_exec_failed", "4294967295"),
    ("ask_max", "output_too_large", "4294967295"),
    ("spin", "tool_exec_failed", "deadline"),
    ("negative_len", "tool_exec_failed", "claimed"),
    ("clobber", None, "ok"),  # wiped its own arguments: its business, not the host's
]


def tool_session(p: Probe, user: str, *, mode: int = 0, arena: bool = False) -> int:
    p.call("set_mode", mode)
    fd = int(p.hc("cchat_create"))
    p.call("set_session", fd)
    for index, name in enumerate(TOOL_NAMES):
        assert p.write_fn(fd, index, tool_schema(name)) == 0
    if arena:
        assert p.set_param(fd, "tool_arena_ptr", 200_000) == 0
        assert p.set_param(fd, "tool_arena_len", 4096) == 0
    assert p.write_msg(fd, "user", user) == 0
    return fd


def auto_send(p: Probe, fd: int) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    body = p.recv_json(p.hc("cchat_send", fd, abi.SEND_AUTO_TOOL_CALL))
    session = p.run.fds.get(fd, ChatSessionFd).session
    messages = list(session.messages)
    assert_valid_transcript(messages)
    return body, [m for m in messages if m["role"] == "tool"]


@pytest.fixture
def tool_host(tool_upstream: ScriptedServer) -> Iterator[Host]:
    h = Host(base_url=tool_upstream.base_url, model="m", max_retries=0, cache_dir=None,
             tool_timeout=0.5, timeout=HANG_GUARD_S)
    yield h
    h.close()


@pytest.mark.parametrize("arena", [False, True], ids=["allocator", "arena"])
@pytest.mark.parametrize(("tool", "code", "text"), TOOL_CASES, ids=[c[0] for c in TOOL_CASES])
def test_hostile_tool_fails_only_its_call(tool_host: Host, tool: str, code: str | None,
                                          text: str, arena: bool) -> None:
    if arena and tool == "mover":
        pytest.skip("the arena is fixed; growing memory only matters for the allocator")
    with neighbour_running(tool_host):
        p = Probe(tool_host, TOOLS)
        try:
            fd = tool_session(p, tool, arena=arena)
            body, answers = auto_send(p, fd)
            # The same instance keeps working: a second send runs the tools again.
            assert p.write_msg(fd, "user", "echo") == 0
            again, _ = auto_send(p, fd)
        finally:
            p.close()
    assert body["choices"][0]["message"]["content"] == 'final: {"y":2}'
    assert again["choices"][0]["message"]["content"] == 'final: {"y":2}'
    content = answers[0]["content"]
    if code is None:
        assert content == text
    else:
        assert json.loads(content)["error"]["code"] == code
        assert text in content
    assert answers[1]["content"] == '{"y":2}'


ALLOC_CASES = [
    (1, "returned NULL"),
    (2, "outside guest memory"),
    (3, "trapped"),
    (4, "deadline"),
    (5, "outside guest memory"),
]


@pytest.mark.parametrize(("mode", "text"), ALLOC_CASES,
                         ids=["null", "outside", "trap", "spin", "straddles-end"])
def test_hostile_allocator_fails_the_call_not_the_host(tool_host: Host, mode: int,
                                                       text: str) -> None:
    with neighbour_running(tool_host):
        p = Probe(tool_host, TOOLS)
        try:
            fd = tool_session(p, "echo", mode=mode)
            body, answers = auto_send(p, fd)
        finally:
            p.close()
    assert len(answers) == 2
    for answer in answers:
        error = json.loads(answer["content"])["error"]
        assert error["code"] == "tool_exec_failed" and text in error["message"]
    assert body["choices"][0]["message"]["content"].startswith("final: ")


def test_allocator_aliasing_and_a_trapping_free_are_survivable(tool_host: Host) -> None:
    p = Probe(tool_host, TOOLS)
    try:
        fd = tool_session(p, "scribble", mode=6)  # every block is the same 4 KiB address
        p.call("set_free_traps", 1)
        body, answers = auto_send(p, fd)
    finally:
        p.close()
    assert json.loads(answers[0]["content"])["error"]["code"] == "tool_exec_failed"
    assert answers[1]["content"] == '{"y":2}'
    assert body["choices"][0]["message"]["content"] == 'final: {"y":2}'


# ---- bad pointers and lengths, every hostcall that takes one ---------------------------

BAD = -16  # 0xFFFFFFF0: far past any memory
END = 4 * 65536  # the probe's first byte past memory


def _straddle(n: int) -> int:
    return END - n // 2


def _fixture(p: Probe, server: ScriptedServer) -> dict[str, int]:
    fd = int(p.hc("cchat_create"))
    assert p.write_msg(fd, "user", "ping") == 0
    rfd = int(p.hc("cchat_send", fd, 0))
    assert rfd >= 0
    ep = int(p.hc("spear_epoll_create"))
    assert p.hc("spear_epoll_ctl", ep, abi.EPOLL_CTL_ADD, rfd, abi.EPOLLIN) == 0
    return {"fd": fd, "rfd": rfd, "ep": ep}


def bad_pointer_calls(f: dict[str, int], ok: int, cap: int) -> list[tuple[str, tuple[int, ...],
                                                                         int]]:
    """(hostcall, args, expected) for every pointer or length parameter.
    `ok` points at valid text, `cap` at a u32 holding a generous capacity."""
    fd, rfd, ep = f["fd"], f["rfd"], f["ep"]
    calls: list[tuple[str, tuple[int, ...], int]] = [
        ("log", (2, BAD, 4), abi.EFAULT),
        ("log", (2, _straddle(64), 64), abi.EFAULT),
        ("log", (2, ok, -1), abi.EINVAL),
        ("cchat_write_msg", (fd, BAD, 4, ok, 4), abi.EFAULT),
        ("cchat_write_msg", (fd, ok, 4, BAD, 4), abi.EFAULT),
        ("cchat_write_msg", (fd, _straddle(64), 64, ok, 4), abi.EFAULT),
        ("cchat_write_msg", (fd, ok, 4, _straddle(64), 64), abi.EFAULT),
        ("cchat_write_msg", (fd, ok, -1, ok, 4), abi.EFAULT),
        ("cchat_write_msg", (fd, ok, 4, ok, -(1 << 31)), abi.EFAULT),
        ("cchat_write_fn", (fd, 0, BAD, 10), abi.EFAULT),
        ("cchat_write_fn", (fd, 0, _straddle(64), 64), abi.EFAULT),
        ("cchat_write_fn", (fd, 0, ok, -5), abi.EFAULT),
        ("cchat_ctl", (fd, abi.CTL_SET_PARAM, ok, BAD), abi.EFAULT),
        ("cchat_ctl", (fd, abi.CTL_SET_PARAM, ok, END - 2), abi.EFAULT),
        ("cchat_ctl", (fd, abi.CTL_SET_PARAM, BAD, cap), abi.EFAULT),
        ("cchat_ctl", (fd, abi.CTL_SET_PARAM, _straddle(64), cap), abi.EFAULT),
        ("cchat_ctl", (rfd, abi.CTL_GET_METRICS, BAD, cap), abi.EFAULT),
        ("cchat_ctl", (rfd, abi.CTL_GET_METRICS, ok, BAD), abi.EFAULT),
        ("cchat_ctl", (rfd, abi.CTL_GET_METRICS, END - 1, cap), abi.EFAULT),
        ("cchat_recv", (rfd, BAD, cap), abi.EFAULT),
        ("cchat_recv", (rfd, ok, BAD), abi.EFAULT),
        ("cchat_recv", (rfd, _straddle(64), cap), abi.EFAULT),
        ("cchat_recv", (rfd, ok, END - 3), abi.EFAULT),
        ("spear_epoll_wait", (ep, BAD, cap, 0), abi.EFAULT),
        ("spear_epoll_wait", (ep, ok, BAD, 0), abi.EFAULT),
        ("spear_epoll_wait", (ep, END - 4, cap, 0), abi.EFAULT),
    ]
    for cmd in (abi.FD_CTL_SET_FLAGS, abi.FD_CTL_GET_FLAGS, abi.FD_CTL_GET_KIND,
                abi.FD_CTL_GET_STATUS, abi.FD_CTL_GET_METRICS):
        calls += [("spear_fd_ctl", (rfd, cmd, ok, BAD), abi.EFAULT)]
        calls += [("spear_fd_ctl", (rfd, cmd, BAD, cap), abi.EFAULT)]
        calls += [("spear_fd_ctl", (rfd, cmd, END - 1, cap), abi.EFAULT)]
    return calls


def test_every_pointer_parameter_faults_cleanly_and_consumes_nothing(tool_upstream: Any,
                                                                     make_host: Any) -> None:
    from spearpy.hostcalls import HOSTCALLS

    host = make_host(base_url=tool_upstream.base_url)
    p = Probe(host, wat_module("probe.wat"))
    try:
        f = _fixture(p, tool_upstream)
        ok, _ = p.put(p.A, "user")
        cap = p.C
        session = p.run.fds.get(f["fd"], ChatSessionFd).session
        before = (list(session.messages), dict(session.params), session.registry.specs())
        _, body_before = p.recv(f["rfd"])
        calls = bad_pointer_calls(f, ok, cap)
        for name, args, expected in calls:
            p.u32(cap, 1 << 20)
            p.put(p.B, json.dumps({"key": "temperature", "value": 0.5}))
            assert p.hc(name, *args) == expected, (name, args)
        # Nothing was consumed or changed by any of them.
        assert (list(session.messages), dict(session.params), session.registry.specs()) == before
        assert p.recv(f["rfd"])[1] == body_before
        assert not p.run.fds.lookup(f["rfd"]).nonblock
    finally:
        p.close()
    pointer_calls = {n for n, (params, _r, _f) in HOSTCALLS.items() if len(params) >= 3}
    # Their bad pointers are each family's own tests: test_streams_hostcalls,
    # test_audio_mic, test_audio_rtasr.
    elsewhere = {n for n in pointer_calls if n.startswith(("rtasr_", "mic_", "user_stream_"))}
    assert pointer_calls - elsewhere - {"cchat_send"} <= {c[0] for c in calls} | {
        "spear_epoll_ctl"}  # epoll_ctl takes no pointer


def test_no_exported_memory_is_efault_everywhere(make_host: Any) -> None:
    wat = (ROOT / "tests/wat/probe.wat").read_text().replace(
        '(memory (export "memory") 4)', "(memory 4)")
    p = Probe(make_host(), bytes(wasmtime.wat2wasm(wat)))
    try:
        fd = p.hc("cchat_create")
        assert p.hc("log", 2, 0, 4) == abi.EFAULT
        assert p.hc("cchat_write_msg", fd, 0, 4, 8, 4) == abi.EFAULT
        assert p.hc("cchat_write_fn", fd, 0, 0, 4) == abi.EFAULT
        assert p.hc("cchat_ctl", fd, abi.CTL_SET_PARAM, 0, 8) == abi.EFAULT
        assert p.hc("spear_fd_ctl", fd, abi.FD_CTL_GET_KIND, 0, 8) == abi.EFAULT
    finally:
        p.close()


def test_json_nested_deeper_than_python_parses_is_refused_cleanly(make_host: Any) -> None:
    deep = "[" * 5000 + "]" * 5000
    p = Probe(make_host(), wat_module("probe.wat"))
    try:
        fd = p.hc("cchat_create")
        for payload, call, expected in [
            (f'{{"key":"stop","value":{deep}}}', "cchat_ctl", abi.EIO),  # a ctl payload: EIO
            (deep, "spear_fd_ctl", abi.EINVAL),
        ]:
            ptr, n = p.put(p.D, payload)
            p.u32(p.A, n)
            cmd = abi.CTL_SET_PARAM if call == "cchat_ctl" else abi.FD_CTL_SET_FLAGS
            assert p.hc(call, fd, cmd, ptr, p.A) == expected, call
        ptr, n = p.put(p.D, '{"name":"t","parameters":' + deep + "}")
        assert p.hc("cchat_write_fn", fd, 0, ptr, n) == abi.EINVAL
        assert p.write_msg(fd, "tool", '{"tool_call_id":"x","content":' + deep + "}") == abi.EINVAL
        # A schema whose validation would recurse forever on any arguments.
        ptr, n = p.put(p.D, '{"name":"t","parameters":{"type":"object","$ref":"#"}}')
        assert p.hc("cchat_write_fn", fd, 0, ptr, n) == abi.EINVAL
    finally:
        p.close()


def test_a_repeated_host_bug_is_logged_a_few_times_not_flooded(make_host: Any) -> None:
    import structlog

    p = Probe(make_host(), wat_module("probe.wat"))
    try:
        with structlog.testing.capture_logs() as lines:
            for _ in range(200):
                LOG_HOST_BUG(p.run, "spear.log", RuntimeError("boom"))
    finally:
        p.close()
    assert len(lines) == context.MAX_LOGGED_HOST_BUGS
    assert p.run._host_bugs == 200
