"""Every hostcall's success and error paths, driven through a real wasm guest."""

from __future__ import annotations

import json
import struct
from typing import Any

from spearpy import abi
from spearpy.fds import ChatSessionFd
from tests.probe import tool_schema

SUM_SCRIPT = {"rules": [{"when": {"no_tool_message": True},
                         "reply": {"content": "Hello from the scripted model, a reply long "
                                              "enough to need a second receive."}}]}


def test_log_writes_prefixed_lines_and_checks_arguments(probe: Any) -> None:
    p = probe()
    ptr, length = p.put(p.A, "first\nsecond")
    assert p.hc("log", 3, ptr, length) == 0
    assert p.hc("log", 2, ptr, -1) == abi.EINVAL
    assert p.hc("log", 2, ptr, abi.MAX_LOG_LEN + 1) == abi.EINVAL
    assert p.hc("log", 2, 4 * 65536 - 2, 10) == abi.EFAULT
    assert p.hc("log", 99, ptr, 5) == 0
    err = bytes(p.run.stderr.data).decode()
    assert "[warn] first\n[warn] second\n" in err
    assert "[info] first\n" in err  # unknown level = info
    # A line ending in a newline is one line: no empty [level] line after it.
    before = len(p.run.stderr.data)
    ptr, length = p.put(p.A, "done\n")
    assert p.hc("log", 2, ptr, length) == 0
    assert bytes(p.run.stderr.data[before:]) == b"[info] done\n"


def test_clocks_and_random(probe: Any) -> None:
    import time

    p = probe()
    ms = p.hc("time_now_ms")
    assert abs(ms - time.time() * 1000) < 60_000
    assert abs(p.hc("wall_time_s") - ms // 1000) <= 1
    values = {p.hc("random_i64") for _ in range(8)}
    assert len(values) == 8
    assert all(-(1 << 63) <= v < (1 << 63) for v in values)


def test_negative_sleep_returns(probe: Any) -> None:
    p = probe()
    assert p.hc("sleep_ms", -5000) is None
    assert p.hc("sleep_ms", 1) is None


def test_session_fds_start_at_1000_and_are_never_reused(probe: Any) -> None:
    p = probe()
    a, b = p.hc("cchat_create"), p.hc("cchat_create")
    assert (a, b) == (1000, 1001)
    assert p.hc("cchat_close", a) == 0
    assert p.hc("cchat_close", a) == 0  # already closed
    assert p.hc("cchat_close", 4242) == abi.EBADF
    assert p.hc("cchat_create") == 1002


def test_write_msg_errors(probe: Any) -> None:
    p = probe()
    fd = p.hc("cchat_create")
    assert p.write_msg(fd, "user", "hi") == 0
    assert p.write_msg(999, "user", "hi") == abi.EBADF
    assert p.write_msg(fd, "wizard", "hi") == abi.EINVAL
    ptr, _ = p.put(p.A, "user")
    assert p.hc("cchat_write_msg", fd, ptr, 4, 4 * 65536 - 1, 10) == abi.EFAULT
    assert p.hc("cchat_write_msg", fd, ptr, 4, p.B, -3) == abi.EFAULT
    bad, n = p.put(p.B, b"\xff\xfe")
    assert p.hc("cchat_write_msg", fd, ptr, 4, bad, n) == abi.EINVAL
    epfd = p.hc("spear_epoll_create")
    assert p.write_msg(epfd, "user", "hi") == abi.EBADF  # fd of the wrong kind


def test_write_fn_registers_and_rejects(probe: Any) -> None:
    p = probe()
    fd = p.hc("cchat_create")
    assert p.write_fn(fd, 0, tool_schema("echo")) == 0
    assert p.write_fn(fd, 0, tool_schema("echo")) == abi.EEXIST
    bare = {"name": "bare", "parameters": {"type": "object"}}
    assert p.write_fn(fd, 0, bare) == 0
    assert p.write_fn(fd, 0, "{not json") == abi.EINVAL
    assert p.write_fn(fd, 0, tool_schema("bad name!")) == abi.EINVAL
    assert p.write_fn(fd, 1, tool_schema("wrong_sig")) == abi.EINVAL
    assert p.write_fn(fd, 99, tool_schema("no_such_slot")) == abi.EINVAL
    assert p.write_fn(fd, -1, tool_schema("negative")) == abi.EINVAL
    assert p.write_fn(5000, 0, tool_schema("x")) == abi.EBADF
    assert p.hc("cchat_write_fn", fd, 0, 4 * 65536, 10) == abi.EFAULT
    session = p.run.fds.get(fd, ChatSessionFd).session
    specs = session.registry.specs()
    assert [s["function"]["name"] for s in specs] == ["echo", "bare"]
    assert specs[1]["type"] == "function"  # the bare form is wrapped


def test_ctl_set_param_and_errors(probe: Any) -> None:
    p = probe()
    fd = p.hc("cchat_create")
    assert p.set_param(fd, "model", "gpt-x") == 0
    assert p.set_param(fd, "temperature", 0.5) == 0
    assert p.set_param(fd, "custom_upstream_key", {"any": 1}) == 0
    assert p.set_param(fd, "max_iterations", "eight") == abi.EINVAL
    assert p.set_param(fd, "messages", []) == abi.EINVAL
    # MCP keys follow SPEAR's session layer; this run's task has not enabled MCP.
    assert p.set_param(fd, "mcp.enabled", True) == abi.EACCES
    assert p.set_param(fd, "mcp.enabled", False) == 0
    assert p.set_param(fd, "mcp.task_default_server_ids", ["x"]) == abi.EACCES
    assert p.set_param(fd, "mcp.server", "x") == abi.EINVAL  # a typo, not a silent no-op
    ptr, n = p.put(p.B, "{broken")
    p.u32(p.A, n)
    assert p.hc("cchat_ctl", fd, abi.CTL_SET_PARAM, ptr, p.A) == abi.EIO
    ptr, n = p.put(p.B, json.dumps({"value": 1}))
    p.u32(p.A, n)
    assert p.hc("cchat_ctl", fd, abi.CTL_SET_PARAM, ptr, p.A) == abi.EINVAL
    assert p.hc("cchat_ctl", fd, 77, ptr, p.A) == abi.EINVAL
    assert p.hc("cchat_ctl", fd, abi.CTL_SET_PARAM, ptr, 4 * 65536) == abi.EFAULT
    assert p.hc("cchat_ctl", 31337, abi.CTL_SET_PARAM, ptr, p.A) == abi.EBADF


def test_send_recv_with_enospc_growth(probe: Any, make_host: Any, scripted: Any) -> None:
    server = scripted(SUM_SCRIPT)
    p = probe(make_host(base_url=server.base_url))
    fd = p.hc("cchat_create")
    assert p.set_param(fd, "model", "guest-model") == 0
    assert p.write_msg(fd, "user", "say hello") == 0
    rfd = p.hc("cchat_send", fd, 0)
    assert rfd >= 1000
    # Too small: the required length comes back, nothing is written or consumed.
    p.put(p.D, b"\x00" * 16)
    p.u32(p.A, 16)
    assert p.hc("cchat_recv", rfd, p.D, p.A) == abi.ENOSPC
    needed = p.u32(p.A)
    assert needed > 16
    assert p.get(p.D, 16) == b"\x00" * 16
    p.u32(p.A, needed)
    assert p.hc("cchat_recv", rfd, p.D, p.A) == needed
    body = json.loads(p.get(p.D, needed))
    assert body["choices"][0]["message"]["content"].startswith("Hello from the scripted model")
    assert body["_spear"]["model"] == "guest-model"
    assert body["_spear"]["iterations"] == 1
    # Bodies are compact, as SPEAR guests search them with strstr.
    assert b'"content":"Hello' in p.get(p.D, needed)
    # The data was not consumed: a second receive returns the same body.
    assert p.recv(rfd) == (needed, p.get(p.D, needed))
    assert server.requests[0].body["model"] == "guest-model"
    assert server.requests[0].body["messages"] == [{"role": "user", "content": "say hello"}]
    assert p.hc("cchat_recv", 4444, p.D, p.A) == abi.EBADF
    assert p.hc("cchat_recv", rfd, 4 * 65536 - 4, p.A) == abi.EFAULT
    assert p.hc("cchat_send", 4444, 0) == abi.EBADF


def test_default_model_and_metrics(probe: Any, make_host: Any, scripted: Any) -> None:
    server = scripted(SUM_SCRIPT)
    p = probe(make_host(base_url=server.base_url, model="host-default"))
    fd = p.hc("cchat_create")
    p.write_msg(fd, "user", "hi")
    rfd = p.hc("cchat_send", fd, abi.SEND_ENABLE_METRICS)
    assert server.requests[0].body["model"] == "host-default"
    p.u32(p.A, 4096)
    n = p.hc("cchat_ctl", rfd, abi.CTL_GET_METRICS, p.B, p.A)
    metrics = json.loads(p.get(p.B, n))
    assert metrics["iterations"] == 1 and metrics["total_tokens"] > 0
    rfd2 = p.hc("cchat_send", fd, 0)  # without bit 0: {}
    p.u32(p.A, 4096)
    n = p.hc("cchat_ctl", rfd2, abi.CTL_GET_METRICS, p.B, p.A)
    assert p.get(p.B, n) == b"{}"


def test_unreachable_upstream_is_an_error_body(probe: Any) -> None:
    p = probe()  # base_url points at a closed port
    fd = p.hc("cchat_create")
    p.write_msg(fd, "user", "hi")
    rfd = p.hc("cchat_send", fd, 0)
    body = p.recv_json(rfd)
    assert body["error"]["code"] == "upstream_unreachable"
    assert "_spear" in body
    assert p.run.fds.readiness(rfd) & abi.EPOLLERR


def test_upstream_http_error_carries_its_message(probe: Any, make_host: Any,
                                                 scripted: Any) -> None:
    server = scripted([{"reply": {"status": 400, "error": "model not supported here"}}])
    p = probe(make_host(base_url=server.base_url))
    fd = p.hc("cchat_create")
    p.write_msg(fd, "user", "hi")
    body = p.recv_json(p.hc("cchat_send", fd, 0))
    assert body["error"]["code"] == "upstream_http_error"
    assert "model not supported here" in body["error"]["message"]
    assert body["error"].get("status") == 400


def test_fd_ctl(probe: Any, make_host: Any, scripted: Any) -> None:
    server = scripted(SUM_SCRIPT)
    p = probe(make_host(base_url=server.base_url))
    fd = p.hc("cchat_create")
    p.write_msg(fd, "user", "hi")
    rfd = p.hc("cchat_send", fd, abi.SEND_ENABLE_METRICS)

    def get(target: int, cmd: int) -> Any:
        p.u32(p.A, 4096)
        n = p.hc("spear_fd_ctl", target, cmd, p.B, p.A)
        assert n > 0, n
        return json.loads(p.get(p.B, n))

    assert get(fd, abi.FD_CTL_GET_KIND) == {"kind": "ChatSession"}
    assert get(rfd, abi.FD_CTL_GET_KIND) == {"kind": "ChatResponse"}
    assert get(rfd, abi.FD_CTL_GET_STATUS)["poll_mask"] == ["EPOLLIN"]
    assert get(rfd, abi.FD_CTL_GET_METRICS)["iterations"] == 1
    ptr, n = p.put(p.C, json.dumps({"set": ["O_NONBLOCK"]}))
    p.u32(p.A, n)
    assert p.hc("spear_fd_ctl", fd, abi.FD_CTL_SET_FLAGS, ptr, p.A) == 0
    assert get(fd, abi.FD_CTL_GET_FLAGS) == {"flags": ["O_NONBLOCK"]}
    p.u32(p.A, 2)
    assert p.hc("spear_fd_ctl", fd, abi.FD_CTL_GET_KIND, p.B, p.A) == abi.ENOSPC
    assert p.u32(p.A) == len(b'{"kind":"ChatSession"}')
    assert p.hc("spear_fd_ctl", fd, 42, p.B, p.A) == abi.EINVAL
    assert p.hc("spear_fd_ctl", 7, abi.FD_CTL_GET_KIND, p.B, p.A) == abi.EBADF
    assert p.hc("spear_fd_ctl", fd, abi.FD_CTL_GET_KIND, p.B, -4) == abi.EFAULT


def test_epoll(probe: Any, make_host: Any, scripted: Any) -> None:
    server = scripted(SUM_SCRIPT)
    p = probe(make_host(base_url=server.base_url))
    fd = p.hc("cchat_create")
    p.write_msg(fd, "user", "hi")
    rfd = p.hc("cchat_send", fd, 0)
    ep = p.hc("spear_epoll_create")
    assert p.hc("spear_epoll_ctl", ep, abi.EPOLL_CTL_ADD, rfd, abi.EPOLLIN) == 0
    assert p.hc("spear_epoll_ctl", ep, abi.EPOLL_CTL_ADD, ep, abi.EPOLLIN) == abi.EINVAL
    assert p.hc("spear_epoll_ctl", ep, 9, rfd, abi.EPOLLIN) == abi.EINVAL
    assert p.hc("spear_epoll_ctl", ep, abi.EPOLL_CTL_ADD, 5555, abi.EPOLLIN) == abi.EBADF
    assert p.hc("spear_epoll_ctl", fd, abi.EPOLL_CTL_ADD, rfd, abi.EPOLLIN) == abi.EBADF
    p.u32(p.A, 64)
    assert p.hc("spear_epoll_wait", ep, p.B, p.A, 0) == 1
    assert struct.unpack("<ii", p.get(p.B, 8)) == (rfd, abi.EPOLLIN)
    assert p.u32(p.A) == 8
    p.u32(p.A, 4)
    assert p.hc("spear_epoll_wait", ep, p.B, p.A, 0) == abi.ENOSPC
    assert p.hc("spear_epoll_ctl", ep, abi.EPOLL_CTL_DEL, rfd, 0) == 0
    p.u32(p.A, 64)
    assert p.hc("spear_epoll_wait", ep, p.B, p.A, 5) == 0
    assert p.hc("spear_epoll_wait", ep, p.B, p.A, -1) == 0  # nothing can become ready
    assert p.hc("spear_epoll_wait", 8888, p.B, p.A, 0) == abi.EBADF
    assert p.hc("spear_epoll_close", ep) == 0
    assert p.hc("spear_epoll_close", ep) == 0
    assert p.hc("spear_epoll_close", fd) == abi.EBADF


def test_audio_families_are_implemented(probe: Any) -> None:
    p = probe()
    # rtasr and mic were ENOSYS until issue 20: they open real fds now.
    fd = p.hc("rtasr_create")
    assert fd >= abi.FIRST_FD and p.run.fds.lookup(fd).kind == "RtAsr"
    assert p.hc("mic_read", 1, 2, 3) == abi.EBADF
    # User streams exist; a run no client can reach refuses to open one, as SPEAR.
    assert p.hc("user_stream_open", 1, 1) == -107


def test_fd_exhaustion_is_emfile(probe: Any, make_host: Any) -> None:
    p = probe(make_host(max_open_fds=3))
    fds = [p.hc("cchat_create") for _ in range(3)]
    assert fds == [1000, 1001, 1002]
    assert p.hc("cchat_create") == abi.EMFILE
    assert p.hc("cchat_close", 1001) == 0
    assert p.hc("cchat_create") == 1003  # closed entries are freed, numbers not reused
