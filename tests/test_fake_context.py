"""Hostcalls and the driver on a RunContext without a Host or wasmtime
(spearpy.testing.fake_context): the seam the run core gives them is all they
need. The model is still real: a scripted server on 127.0.0.1 behind a real
OpenAIBackend."""

from __future__ import annotations

import json
import struct
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from spearpy import abi
from spearpy.backends.factory import ScriptedBackend
from spearpy.backends.specs import HostDefaults
from spearpy.chat.session import ChatSession
from spearpy.config import HostConfig
from spearpy.context import RunContext, RunOptions
from spearpy.driver.send import run_send
from spearpy.errors import HostInterrupt
from spearpy.hostcalls import FAMILIES, chat, fd, system
from spearpy.testing.context import BytesMemory, fake_context
from spearpy.tools.python import PythonTools
from spearpy.tools.sources import HostTools

SCRIPT = {
    "rules": [
        {"name": "ask", "when": {"tool_messages": 0, "tool_names_include": ["add"]},
         "reply": {"tool_calls": [{"name": "add", "arguments": {"a": 7, "b": 35}}]}},
        {"name": "report", "when": {"last_tool_contains": "42"},
         "reply": {"content": "7 + 35 = {{last_tool}}"}},
    ],
    "default": {"content": "nothing scripted"},
    "models": ["scripted"],
}
ROLE, TEXT, PARAM, LEN, OUT = 0x100, 0x200, 0x400, 0x800, 0x1000


@pytest.fixture
def backend(tmp_path: Path) -> Iterator[ScriptedBackend]:
    script = tmp_path / "script.json"
    script.write_text(json.dumps(SCRIPT))
    made = ScriptedBackend(str(script), HostDefaults(model="scripted"))
    yield made
    made.close()


def _memory(ctx: RunContext) -> BytesMemory:
    assert isinstance(ctx.memory, BytesMemory)
    return ctx.memory


def _python_tools() -> HostTools:
    tools = PythonTools()

    def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    tools.add(add, parameters={"type": "object", "properties": {
        "a": {"type": "integer"}, "b": {"type": "integer"}}, "required": ["a", "b"]})
    return HostTools(python_tools=tools)


def _write_msg(ctx: RunContext, session: int, role: str, text: str) -> int:
    mem = _memory(ctx)
    mem.put(ROLE, role)
    mem.put(TEXT, text)
    return chat.cchat_write_msg(ctx, session, ROLE, len(role), TEXT, len(text.encode()))


def _recv(ctx: RunContext, response: int) -> dict[str, Any]:
    mem = _memory(ctx)
    mem.put(LEN, struct.pack("<I", 0x4000))
    n = chat.cchat_recv(ctx, response, OUT, LEN)
    assert n > 0
    body: dict[str, Any] = json.loads(bytes(mem.data[OUT:OUT + n]))
    return body


def test_an_auto_send_runs_the_whole_loop_on_a_fake_context(backend: ScriptedBackend) -> None:
    ctx = fake_context(backend=backend, tools=_python_tools())
    session = chat.cchat_create(ctx)
    assert session >= abi.FIRST_FD
    assert _write_msg(ctx, session, "user", "add 7 and 35") == 0
    response = chat.cchat_send(ctx, session, abi.SEND_AUTO_TOOL_CALL)
    assert response > session
    body = _recv(ctx, response)
    assert body["choices"][0]["message"]["content"] == "7 + 35 = 42"
    assert body["_spear"]["tool_calls"] == 1 and body["_spear"]["iterations"] == 2
    assert len(backend_requests(backend)) == 2
    assert chat.cchat_close(ctx, response) == 0
    assert chat.cchat_close(ctx, session) == 0
    assert [t["session_fd"] for t in ctx.transcripts] == [session]
    assert ctx.usage["total_tokens"] > 0


def backend_requests(backend: ScriptedBackend) -> list[Any]:
    requests: list[Any] = backend._server.requests
    return requests


def test_the_driver_runs_a_send_without_hostcalls(backend: ScriptedBackend) -> None:
    ctx = fake_context(backend=backend, tools=_python_tools())
    session = ChatSession(fd=1000)
    assert session.write_message("user", "add 7 and 35") == 0
    response = run_send(ctx, session, abi.SEND_AUTO_TOOL_CALL)
    assert not response.is_error
    answer = json.loads(response.body)
    assert answer["choices"][0]["message"]["content"] == "7 + 35 = 42"
    roles = [m["role"] for m in session.messages]
    assert roles == ["user", "assistant", "tool", "assistant"]


def test_without_a_backend_the_send_answers_bad_backend() -> None:
    ctx = fake_context()
    session = chat.cchat_create(ctx)
    _write_msg(ctx, session, "user", "hi")
    response = chat.cchat_send(ctx, session, 0)
    assert _recv(ctx, response)["error"]["code"] == "bad_backend"


def test_pointers_outside_the_fake_memory_are_efault() -> None:
    ctx = fake_context(memory_bytes=4096)
    session = chat.cchat_create(ctx)
    assert chat.cchat_write_msg(ctx, session, 4090, 10, 0, 1) == abi.EFAULT
    assert system.log(ctx, 1, 4000, 200) == abi.EFAULT
    assert chat.cchat_recv(ctx, session, 0, 5000) == abi.EBADF  # not a response fd


def test_log_and_clocks_and_sleep_on_a_fake_context() -> None:
    ctx = fake_context(config=HostConfig(cache_dir=None, max_log_bytes=16))
    _memory(ctx).put(0, "hello\n")
    assert system.log(ctx, 2, 0, 6) == 0
    assert ctx.stderr is not None and bytes(ctx.stderr.data).endswith(b"] hello\n")
    now_ms = system.time_now_ms(ctx)
    assert abs(now_ms - time.time() * 1000) < 60_000
    ctx.interrupts.deadline = time.monotonic() + 0.05
    started = time.monotonic()
    with pytest.raises(HostInterrupt):
        system.sleep_ms(ctx, 60_000)
    assert time.monotonic() - started < 5.0  # the deadline, not the minute, ended it
    _memory(ctx).put(0, "x" * 20)
    with pytest.raises(HostInterrupt) as over:
        system.log(ctx, 2, 0, 20)
    assert over.value.outcome == "log_limit"


def test_epoll_sees_a_filled_response_as_readable(backend: ScriptedBackend) -> None:
    ctx = fake_context(backend=backend)
    session = chat.cchat_create(ctx)
    _write_msg(ctx, session, "user", "hello")
    response = chat.cchat_send(ctx, session, 0)
    ep = fd.spear_epoll_create(ctx)
    assert fd.spear_epoll_ctl(ctx, ep, abi.EPOLL_CTL_ADD, response, abi.EPOLLIN) == 0
    mem = _memory(ctx)
    mem.put(LEN, struct.pack("<I", 64))
    assert fd.spear_epoll_wait(ctx, ep, OUT, LEN, 0) == 1
    ready_fd, mask = struct.unpack_from("<ii", mem.data, OUT)
    assert ready_fd == response and mask & abi.EPOLLIN


def test_host_bytes_are_charged_on_the_context() -> None:
    ctx = fake_context(config=HostConfig(cache_dir=None, max_host_bytes=1 << 20))
    before = ctx.host_bytes
    sessions = [chat.cchat_create(ctx) for _ in range(10)]
    assert ctx.host_bytes > before
    opened = ctx.host_bytes
    for s in sessions:
        assert chat.cchat_close(ctx, s) == 0
    assert ctx.host_bytes > opened - 10  # closed transcripts stay charged
    with pytest.raises(HostInterrupt) as over:
        while True:
            chat.cchat_close(ctx, chat.cchat_create(ctx))
    assert over.value.outcome == "memory_limit"


def test_every_family_names_functions_that_exist_with_its_arity() -> None:
    import inspect

    for family in FAMILIES:
        for name, hostcall in family.calls.items():
            params = inspect.signature(family.function(name)).parameters
            assert len(params) == 1 + len(hostcall.params), (family.name, name)
        for hook in (family.on_run_start, family.on_run_end):
            if hook is not None:
                assert callable(family.function(hook)), (family.name, hook)
    names = [n for f in FAMILIES for n in f.calls]
    assert len(names) == len(set(names))


def test_the_outside_world_is_marked_where_answers_depend_on_it() -> None:
    outside = {n for f in FAMILIES for n in f.outside_world()}
    for name in ("time_now_ms", "wall_time_s", "random_i64", "clock_time_get", "cchat_send",
                 "spear_epoll_wait", "user_stream_read", "mic_read", "rtasr_read"):
        assert name in outside, name
    for name in ("cchat_create", "cchat_write_msg", "cchat_recv", "log", "mic_create"):
        assert name not in outside, name


def test_user_streams_hooks_run_only_for_runs_with_streams() -> None:
    # tests/test_startup.py checks the module is not even imported for such a run.
    from spearpy.hostcalls import run_ended, run_started
    from spearpy.streams.hub import StreamHub

    streams = next(f for f in FAMILIES if f.name == "user_streams")
    plain = fake_context(options=RunOptions())
    assert not streams.applies_to(plain)
    run_started(plain)
    run_ended(plain)
    hub = StreamHub()
    served = fake_context(options=RunOptions(streams=hub))
    assert streams.applies_to(served)
    run_started(served)  # binds the hub to the run's waker
    run_ended(served)
