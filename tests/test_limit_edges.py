"""Every limit at its exact edge: one below and at the limit are accepted,
one above is refused.

ONE table (`EDGES`) drives the test: a row names the limit, its value in
the test, the step of "one" (a page for linear memory, a byte or a count
otherwise) and `attempt(kit, limit, size) -> accepted`, which exercises it
through the real part that enforces it (a wasm guest's hostcalls, the tool
loop against the scripted loopback model, the service over HTTP). A new
limit gets its edges by adding a row; docs/testing.md lists the rows.

The bug this catches: `>=` where `>` was meant (or the reverse), which no
test far from the edge sees.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import wasmtime

from spearpy import _json, abi
from spearpy.audio.budget import audio_budget
from spearpy.config import HostConfig
from spearpy.serve import BackgroundServer, ServeConfig, create_app
from spearpy.streams import ssf
from spearpy.streams.queue import FrameQueue
from tests.probe import Probe, tool_schema, wat_module

PROBE = wat_module("probe.wat")
LIMITS_GUEST = wat_module("hostile_limits.wat")  # exports `grow`
BIG = 5  # probe.wat's table[5]: writes $big_size bytes of "x"
ECHO = 0
PAGE = 65536


@dataclass
class Kit:
    """What a row may use: hosts and guests, the scripted model, the service."""

    make_host: Any
    scripted: Any
    request: pytest.FixtureRequest
    probes: list[Probe]

    def probe(self, wasm: bytes = PROBE, **config: Any) -> Probe:
        p = Probe(self.make_host(**config), wasm)
        self.probes.append(p)
        return p

    def serve_url(self) -> str:
        url: str = self.request.getfixturevalue("body_service")
        return url


@dataclass(frozen=True)
class Edge:
    name: str  # the option or constant, as docs/testing.md names it
    limit: int
    attempt: Callable[[Kit, int, int], bool]
    step: int = 1


# ---- the tool loop, against the scripted model ------------------------------------------

def _loop_session(kit: Kit, script: dict[str, Any], tools: dict[str, int],
                  params: dict[str, Any], big: int = 0) -> tuple[Probe, Any, dict[str, Any]]:
    """One auto send over `tools`; `big`: what probe.wat's big tool writes."""
    server = kit.scripted(script)
    p = kit.probe(base_url=server.base_url)
    p.call("set_big", big)
    fd = int(p.hc("cchat_create"))
    for name, index in tools.items():
        assert p.write_fn(fd, index, tool_schema(name)) == 0
    for key, value in params.items():
        assert p.set_param(fd, key, value) == 0, key
    assert p.write_msg(fd, "user", "go") == 0
    body = p.recv_json(p.hc("cchat_send", fd, abi.SEND_AUTO_TOOL_CALL))
    return p, server, body


def _tool_output(arena: bool) -> Callable[[Kit, int, int], bool]:
    def attempt(kit: Kit, limit: int, size: int) -> bool:
        script = {"rules": [{"when": {"no_tool_message": True},
                             "reply": {"tool_calls": [{"name": "big", "arguments": {}}]}}],
                  "default": {"content": "done"}}
        params: dict[str, Any] = {"max_tool_output_bytes": limit}
        if arena:  # an arena larger than the output: the cap, not the arena, decides
            params.update(tool_arena_ptr=150_000, tool_arena_len=limit + 4096)
        _p, server, _body = _loop_session(kit, script, {"big": BIG}, params, big=size)
        content = next(m["content"] for m in server.requests[-1].body["messages"]
                       if m["role"] == "tool")
        if content == "x" * size:
            return True
        assert json.loads(content)["error"]["code"] == "output_too_large", content
        return False

    return attempt


def _completions(count: int) -> dict[str, Any]:
    """A model that asks for one tool call `count - 1` times, then answers."""
    rules = [{"reply": {"tool_calls": [{"name": "echo", "arguments": {}}]},
              "times": count - 1}] if count > 1 else []
    return {"rules": rules, "default": {"content": "done"}}


def _iterations(kit: Kit, limit: int, size: int) -> bool:
    _p, server, body = _loop_session(kit, _completions(size), {"echo": ECHO},
                                     {"max_iterations": limit, "max_total_tool_calls": 100})
    if "error" in body:
        assert body["error"]["code"] == "tool_call_limit", body
        assert len(server.requests) == limit
        return False
    assert body["_spear"]["iterations"] == size
    return True


def _tool_calls(kit: Kit, limit: int, size: int) -> bool:
    _p, _server, body = _loop_session(kit, _completions(size + 1), {"echo": ECHO},
                                      {"max_iterations": 100, "max_total_tool_calls": limit})
    if "error" in body:
        assert body["error"]["code"] == "tool_call_limit", body
        assert "max_total_tool_calls" in body["error"]["message"]
        return False
    assert body["_spear"]["tool_calls"] == size
    return True


def _parallel_tools(kit: Kit, limit: int, size: int) -> bool:
    """A reply of `size` calls of a Python tool that waits (5 s at most)
    until all of them run at once, on a host allowing `limit` at once."""
    import threading

    from spearpy.tools.python import PythonTools

    cond = threading.Condition()
    seen = {"active": 0, "most": 0, "all": False}

    def wait_all() -> str:
        with cond:
            seen["active"] += 1
            seen["most"] = max(seen["most"], seen["active"])
            seen["all"] = seen["all"] or seen["active"] >= size
            cond.notify_all()
            cond.wait_for(lambda: bool(seen["all"]), 5.0)
            seen["active"] -= 1
        return "ok"

    tools = PythonTools()
    tools.add(wait_all)
    script = {"rules": [{"when": {"no_tool_message": True}, "reply": {"tool_calls": [
        {"name": "wait_all", "arguments": {}} for _ in range(size)]}}],
        "default": {"content": "done"}}
    server = kit.scripted(script)
    p = kit.probe(base_url=server.base_url, python_tools=tools, max_parallel_tools=limit)
    fd = int(p.hc("cchat_create"))
    assert p.write_msg(fd, "user", "go") == 0
    body = p.recv_json(p.hc("cchat_send", fd, abi.SEND_AUTO_TOOL_CALL))
    assert body["_spear"]["tool_calls"] == size, body
    if seen["most"] == size:
        return True
    assert seen["most"] == limit, seen
    return False


# ---- run limits: hostcalls of a live guest ----------------------------------------------

def _ends_run(call: Callable[[], int], outcome: str, p: Probe) -> bool:
    """True if `call` returned 0; False if it ended the run with `outcome`."""
    try:
        rc = call()
    except wasmtime.WasmtimeError:
        noted = p.run.interrupts.noted
        assert noted is not None and noted[0] == outcome, noted
        return False
    assert rc == 0, rc
    return True


def _host_bytes(kit: Kit, limit: int, size: int) -> bool:
    # A message costs len(role) + len(content); filled with big messages
    # first, the last one lands exactly on the edge.
    p = kit.probe(LIMITS_GUEST, max_host_bytes=limit)
    assert p.call("grow", 8) >= 0
    fd = int(p.hc("cchat_create"))
    role = p.put(256, "user")[0]
    content = p.put(PAGE, b"m" * (200 * 1024))[0]
    while size - p.run.host_bytes > 200 * 1024 + 4:
        assert p.hc("cchat_write_msg", fd, role, 4, content, 200 * 1024) == 0
    last = size - p.run.host_bytes - 4
    return _ends_run(lambda: int(p.hc("cchat_write_msg", fd, role, 4, content, last)),
                     "memory_limit", p)


def _log_bytes(kit: Kit, limit: int, size: int) -> bool:
    p = kit.probe(LIMITS_GUEST, max_log_bytes=limit)
    ptr = p.put(1024, b"l" * 100)[0]
    for _ in range(size // 100):
        if not _ends_run(lambda: int(p.hc("log", 2, ptr, 100)), "log_limit", p):
            return False
    return _ends_run(lambda: int(p.hc("log", 2, ptr, size % 100)), "log_limit", p)


def _einval_above(hostcall: Callable[[Probe, int, int], int]) -> Callable[[Kit, int, int], bool]:
    """A per-call size cap: 0 up to it, EINVAL past it (the run goes on)."""
    def attempt(kit: Kit, limit: int, size: int) -> bool:
        p = kit.probe(LIMITS_GUEST, max_log_bytes=1 << 40)
        assert p.call("grow", (size + 2 * PAGE) // PAGE) >= 0
        rc = hostcall(p, PAGE, size)
        assert rc in (0, abi.EINVAL), rc
        return rc == 0

    return attempt


def _log_call(p: Probe, ptr: int, size: int) -> int:
    p.put(ptr, b"l" * size)
    return int(p.hc("log", 2, ptr, size))


def _padded(text: str, size: int) -> bytes:
    """`text` padded with JSON whitespace to exactly `size` bytes."""
    return text.encode() + b" " * (size - len(text.encode()))


def _tool_schema_call(p: Probe, ptr: int, size: int) -> int:
    fd = int(p.hc("cchat_create"))
    p.put(ptr, _padded(json.dumps(tool_schema("exact")), size))
    return int(p.hc("cchat_write_fn", fd, 0, ptr, size))


def _param_call(p: Probe, ptr: int, size: int) -> int:
    fd = int(p.hc("cchat_create"))
    p.put(ptr, _padded('{"key":"temperature","value":0.5}', size))
    p.u32(128, size)
    return int(p.hc("cchat_ctl", fd, abi.CTL_SET_PARAM, ptr, 128))


def _fd_flags_call(p: Probe, ptr: int, size: int) -> int:
    fd = int(p.hc("cchat_create"))
    p.put(ptr, _padded('{"set":[],"clear":[]}', size))
    p.u32(128, size)
    return int(p.hc("spear_fd_ctl", fd, abi.FD_CTL_SET_FLAGS, ptr, 128))


def _open_fds(kit: Kit, limit: int, size: int) -> bool:
    p = kit.probe(LIMITS_GUEST, max_open_fds=limit)
    fds = [int(p.hc("cchat_create")) for _ in range(size)]
    assert all(fd >= abi.FIRST_FD or fd == abi.EMFILE for fd in fds), fds
    return abi.EMFILE not in fds


def _memory(kit: Kit, limit: int, size: int) -> bool:
    p = kit.probe(LIMITS_GUEST, max_memory=limit)
    pages = size // PAGE - p.run.memory.size() // PAGE
    return int(p.call("grow", pages)) >= 0


def _audio(seconds: bool) -> Callable[[Kit, int, int], bool]:
    """The run's audio budget, made from its config as a mic read makes it;
    16-bit mono at 1000 Hz: 2000 bytes a second, so a byte is 1/2000 s."""
    def attempt(kit: Kit, limit: int, size: int) -> bool:
        config = {"max_audio_seconds": limit / 2000} if seconds else {"max_audio_bytes": limit}
        p = kit.probe(**config)
        budget = audio_budget(p.run)
        half = size // 2
        assert budget.charge(half, half / 2000)
        return budget.charge(size - half, (size - half) / 2000)

    return attempt


# ---- streams and the service ------------------------------------------------------------

def _frame(size: int) -> bytes:
    frame = ssf.Frame(stream_id=1, seq=0, data=b"p" * (size - ssf.HEADER_LEN))
    encoded = frame.encode()
    assert len(encoded) == size
    return encoded


def _ssf_frame(_kit: Kit, limit: int, size: int) -> bool:
    try:
        ssf.check(_frame(size), limit)
    except ssf.SsfError as exc:
        assert "over the" in str(exc)
        return False
    return True


def _stream_queue(_kit: Kit, limit: int, size: int) -> bool:
    queue = FrameQueue(limit, max_frames=100)
    assert queue.offer(b"q" * (limit // 2))
    return queue.offer(b"q" * (size - limit // 2))


def _body(chunked: bool) -> Callable[[Kit, int, int], bool]:
    def attempt(kit: Kit, limit: int, size: int) -> bool:
        assert limit == BODY_CAP
        body = _padded('{"module":"no_such_module"}', size)

        def pieces() -> Iterator[bytes]:  # no Content-Length: the cap counts what arrives
            for at in range(0, len(body), 100):
                yield body[at:at + 100]

        with httpx.Client(base_url=kit.serve_url(), timeout=30) as client:
            reply = client.post("/v1/runs", content=pieces() if chunked else body,
                                headers={"content-type": "application/json"})
        if reply.status_code == 413:
            assert reply.json()["max_bytes"] == limit
            return False
        assert reply.status_code in (404, 422), reply.text  # past the cap, to the route
        return True

    return attempt


def _json_depth(_kit: Kit, limit: int, size: int) -> bool:
    assert limit == _json.MAX_JSON_DEPTH
    try:
        _json.loads("[" * size + "]" * size)
    except _json.StructureError:
        return False
    return True


def _json_containers(_kit: Kit, limit: int, size: int) -> bool:
    assert limit == _json.MAX_JSON_CONTAINERS
    try:
        _json.loads("[" + ",".join(["{}"] * (size - 1)) + "]")
    except _json.StructureError:
        return False
    return True


BODY_CAP = 1024
EDGES = [
    Edge("max_tool_output_bytes (host-grown buffer)", 20_000, _tool_output(arena=False)),
    Edge("max_tool_output_bytes (tool arena)", 20_000, _tool_output(arena=True)),
    Edge("max_iterations", 3, _iterations),
    Edge("max_total_tool_calls", 3, _tool_calls),
    Edge("max_parallel_tools", 3, _parallel_tools),
    Edge("max_host_bytes", 1 << 20, _host_bytes),
    Edge("max_log_bytes", 1000, _log_bytes),
    Edge("MAX_LOG_LEN (one log call)", abi.MAX_LOG_LEN, _einval_above(_log_call)),
    Edge("MAX_TOOL_SCHEMA_BYTES", abi.MAX_TOOL_SCHEMA_BYTES, _einval_above(_tool_schema_call)),
    Edge("MAX_PARAM_BYTES", abi.MAX_PARAM_BYTES, _einval_above(_param_call)),
    Edge("MAX_FD_FLAGS_BYTES", abi.MAX_FD_FLAGS_BYTES, _einval_above(_fd_flags_call)),
    Edge("max_open_fds", 3, _open_fds),
    Edge("max_memory", 8 * PAGE, _memory, step=PAGE),
    Edge("max_audio_bytes", 6400, _audio(seconds=False)),
    Edge("max_audio_seconds", 6400, _audio(seconds=True)),
    Edge("StreamLimits.max_frame_bytes", 4096, _ssf_frame),
    Edge("StreamLimits.max_queue_bytes", 4096, _stream_queue),
    Edge("ServeConfig.max_body_bytes (Content-Length)", BODY_CAP, _body(chunked=False)),
    Edge("ServeConfig.max_body_bytes (chunked)", BODY_CAP, _body(chunked=True)),
    Edge("MAX_JSON_DEPTH", _json.MAX_JSON_DEPTH, _json_depth),
    Edge("MAX_JSON_CONTAINERS", _json.MAX_JSON_CONTAINERS, _json_containers),
]


@pytest.fixture(scope="module")
def body_service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    where = tmp_path_factory.mktemp("limit-edges")
    (where / "modules").mkdir()
    config = ServeConfig(modules_dir=where / "modules", state_dir=where / "state",
                         host=HostConfig(base_url="http://127.0.0.1:9/v1", cache_dir=None),
                         max_body_bytes=BODY_CAP, grace=0.5)
    with BackgroundServer(create_app(config), grace=0.5) as running:
        yield running.url


@pytest.fixture
def kit(make_host: Any, scripted: Any, request: pytest.FixtureRequest) -> Iterator[Kit]:
    made = Kit(make_host, scripted, request, [])
    yield made
    for p in made.probes:
        p.close()


@pytest.mark.parametrize("offset", [-1, 0, 1], ids=["below", "at", "above"])
@pytest.mark.parametrize("edge", EDGES, ids=[edge.name for edge in EDGES])
def test_a_limit_holds_at_its_exact_edge(kit: Kit, edge: Edge, offset: int) -> None:
    accepted = edge.attempt(kit, edge.limit, edge.limit + offset * edge.step)
    assert accepted is (offset <= 0), f"{edge.name} at limit{offset:+d}"


def test_every_run_limit_of_the_config_has_a_row() -> None:
    """A new size or count option of HostConfig needs its row here."""
    covered = {edge.name.split(" ")[0] for edge in EDGES}
    sized = {name for name in HostConfig.model_fields
             if name.startswith("max_") and not name.endswith("_cap")
             and name not in {"max_retries"}}
    assert sized - covered - {"max_tool_calls"} == set()  # max_tool_calls: max_total_tool_calls
    assert Path(__file__).name in (Path(__file__).parent.parent / "docs" / "testing.md"
                                   ).read_text()
