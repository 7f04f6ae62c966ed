"""P1: one guest tool call and one hostcall, spearpy vs plain wasmtime-py
(and vs Extism for the tool call), all on the same 200-byte payloads."""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

import wasmtime

from bench.guests import (
    ARENA_LEN,
    ARENA_PTR,
    CONTENT_PTR,
    ECHO,
    ROLE_PTR,
    LiveGuest,
    RawToolCall,
    extism_echo_wasm,
    guest_wasm,
)
from bench.stats import Row, Series, Target, interleaved
from spearpy import _native, abi
from spearpy.chat.protocol import CallBudget
from spearpy.fds import ChatSessionFd
from spearpy.guestcall import GuestTools
from spearpy.host import Host

PAYLOAD = ('{"text":"' + "x" * 189 + '"}')  # 200 bytes of JSON arguments
assert len(PAYLOAD) == 200
CONTENT = b"y" * 200
HOSTCALLS_PER_OP = 1000
_MAX_ROLE_LEN = max(len(role) for role in abi.ROLES)
_U32 = struct.Struct("<I")


class PlainGuest:
    """The same guest wired with wasmtime-py's generic API only."""

    def __init__(self) -> None:
        self.engine = wasmtime.Engine()
        self.store = wasmtime.Store(self.engine)
        module = wasmtime.Module(self.engine, guest_wasm())
        self.messages: list[dict[str, str]] = []
        # The same bookkeeping spearpy's hostcall does, so that the two differ
        # in how the call is bound, not in what it does: the session looked
        # up by fd, the size limits, the host-memory budget charged.
        self.sessions: dict[int, list[dict[str, str]]] = {}
        self.host_bytes, self.max_host_bytes = 0, 64 << 20
        linker = wasmtime.Linker(self.engine)
        for item in module.imports:
            ty = item.type
            assert isinstance(ty, wasmtime.FuncType)
            if item.name == "cchat_write_msg":
                linker.define_func(item.module, item.name, ty, self._write_msg,
                                   access_caller=True)
            else:
                linker.define_func(item.module, item.name, ty, _zero(len(ty.results)))
        instance = linker.instantiate(self.store, module)
        exports = instance.exports(self.store)
        memory, table = exports["memory"], exports["__indirect_function_table"]
        assert isinstance(memory, wasmtime.Memory) and isinstance(table, wasmtime.Table)
        self.memory = memory
        tool = table.get(self.store, ECHO)
        assert isinstance(tool, wasmtime.Func)
        self.tool = tool
        self.loop = exports["loop_write_msg"]

    def _write_msg(self, caller: wasmtime.Caller, fd: int, rp: int, rl: int, cp: int,
                   cl: int) -> int:
        messages = self.sessions.get(fd)
        if messages is None:
            return abi.EBADF
        if rl > _MAX_ROLE_LEN or cl > abi.MAX_TOOL_ANSWER_BYTES:
            return abi.EINVAL
        if self.host_bytes + rl + cl > self.max_host_bytes:
            return abi.ENOSPC  # spearpy ends the run there; never reached here
        memory = caller["memory"]
        assert isinstance(memory, wasmtime.Memory)
        try:
            role = memory.read(caller, rp, rp + rl).decode()
            content = memory.read(caller, cp, cp + cl).decode()
        except (wasmtime.WasmtimeError, UnicodeDecodeError, ValueError):
            return abi.EFAULT
        if role not in abi.ROLES:
            return abi.EINVAL
        messages.append({"role": role, "content": content})
        self.host_bytes += rl + cl
        return 0

    def tool_call(self, arguments: str) -> str:
        """Arguments in, output out, as spearpy's arena layout does it."""
        store, memory = self.store, self.memory
        data = arguments.encode()
        out_ptr = (ARENA_PTR + len(data) + 1 + 7) & ~7
        len_ptr = ARENA_PTR + ARENA_LEN - 8
        memory.write(store, data + b"\0", ARENA_PTR)
        memory.write(store, _U32.pack(len_ptr - out_ptr), len_ptr)
        rc = self.tool(store, ARENA_PTR, len(data), out_ptr, len_ptr)
        if rc != 0:
            raise RuntimeError(rc)
        length = _U32.unpack(memory.read(store, len_ptr, len_ptr + 4))[0]
        return bytes(memory.read(store, out_ptr, out_ptr + length)).decode()


def _zero(nresults: int) -> Callable[..., Any]:
    return (lambda *_a: 0) if nresults else (lambda *_a: None)


def _extism_call() -> tuple[Callable[[], Any] | None, str]:
    try:
        import extism
    except ImportError:
        return None, "extism is not installed here (tools/bench_env.sh installs it)"
    plugin = extism.Plugin(extism_echo_wasm(), wasi=False, functions=[])
    payload = PAYLOAD.encode()
    assert plugin.call("echo", payload) == payload

    def op() -> str:
        out: bytes = plugin.call("echo", PAYLOAD)
        return out.decode()

    return op, f"extism {getattr(extism, '__version__', '')}".strip()


def run(quick: bool) -> list[Row]:
    repeats, batch = (15, 300) if quick else (60, 1000)
    host = Host(cache_dir=None, model="bench", base_url="http://127.0.0.1:9/v1")
    guest = LiveGuest(host)
    plain = PlainGuest()
    floor = RawToolCall(guest, ECHO)
    previous = _native.enter_run(guest.run)
    try:
        # The loop's own path: one guest source per run and one budget per
        # send (call_tool builds both per call, a cost no send pays).
        source = GuestTools(guest.run)
        budget = CallBudget(65536, params={"tool_arena_ptr": ARENA_PTR,
                                           "tool_arena_len": ARENA_LEN})

        def spear_tool() -> str:
            return source.call(ECHO, PAYLOAD, budget).output

        assert spear_tool() == PAYLOAD
        assert plain.tool_call(PAYLOAD) == PAYLOAD
        assert floor(PAYLOAD) == PAYLOAD
        ops: dict[str, Callable[[], Any]] = {
            "spearpy": spear_tool,
            "wasmtime-py": lambda: plain.tool_call(PAYLOAD),
            "c-api floor": lambda: floor(PAYLOAD),
        }
        extism_op, extism_label = _extism_call()
        if extism_op is not None:
            ops["extism"] = extism_op
        tools = interleaved(ops, batch=batch, repeats=repeats)
        rows = [
            Row("P1.tool_call.vs_wasmtime_py", "P1", "spearpy tool call (200 B in/out)",
                "wasmtime-py Func.__call__ + Memory.read/write", "us", tools["spearpy"],
                tools["wasmtime-py"], Target("<=", 0.125, "<= 0.125 (>= 8x faster)")),
            Row("P1.tool_call.vs_extism", "P1", "spearpy tool call (200 B in/out)",
                extism_label if extism_op else "extism", "us", tools["spearpy"],
                tools.get("extism"), Target("<=", 1.0, "< 1 (faster than Extism)"),
                note="" if extism_op else extism_label),
            Row("P1.tool_call.vs_floor", "P1", "spearpy tool call (200 B in/out)",
                "C-API floor (unchecked call, raw memcpy, no checks)", "us",
                tools["spearpy"], tools["c-api floor"],
                note="information: what spearpy's checks and bookkeeping cost"),
        ]
        rows.append(_hostcall_row(guest, plain, repeats, max(batch // HOSTCALLS_PER_OP, 2)))
        return rows
    finally:
        _native.enter_run(previous)
        guest.close()
        host.close()


def _hostcall_row(guest: LiveGuest, plain: PlainGuest, repeats: int, batch: int) -> Row:
    fd = guest.session(tools=False)
    session = guest.run.fds.get(fd, ChatSessionFd).session
    rp, rl = guest.put(ROLE_PTR, b"user")
    cp, cl = guest.put(CONTENT_PTR, CONTENT)
    spear_loop = guest.exports["loop_write_msg"]
    assert isinstance(spear_loop, wasmtime.Func)
    plain_loop = plain.loop
    assert isinstance(plain_loop, wasmtime.Func)
    plain.sessions[fd] = plain.messages
    plain.memory.write(plain.store, b"user", ROLE_PTR)
    plain.memory.write(plain.store, CONTENT, CONTENT_PTR)
    n = HOSTCALLS_PER_OP

    def spear_op() -> None:
        if spear_loop(guest.store, n, fd, rp, rl, cp, cl) != 0:
            raise RuntimeError("cchat_write_msg failed")

    def plain_op() -> None:
        if plain_loop(plain.store, n, fd, rp, rl, cp, cl) != 0:
            raise RuntimeError("plain cchat_write_msg failed")

    def reset() -> None:
        session.messages.clear()
        plain.messages.clear()
        guest.run.host_bytes = plain.host_bytes = 0

    spear_op()
    plain_op()
    assert session.messages[-1] == {"role": "user", "content": CONTENT.decode()}
    assert plain.messages[-1] == session.messages[-1]
    result = interleaved({"spearpy": spear_op, "plain": plain_op}, batch=batch,
                         repeats=repeats, between=reset)
    per_call = {k: Series([s / n for s in v.samples]) for k, v in result.items()}
    return Row("P1.hostcall.vs_wasmtime_py", "P1", "spearpy hostcall cchat_write_msg (200 B)",
               "wasmtime-py define_func callback (access_caller)", "us", per_call["spearpy"],
               per_call["plain"], Target("<=", 0.125, "<= 0.125 (>= 8x faster)"),
               note=f"timed as {n} calls from inside one guest export")
