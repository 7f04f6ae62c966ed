"""`spearpy mcp serve`: a guest's registered tools served as an MCP server and
used through the SDK's own client, over stdio and over streamable HTTP.

The C sample c_multi_tool must answer an MCP client exactly as it answers the
auto tool loop; a tool that traps or runs past its deadline fails only that
call; the run ends cleanly when the server stops."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import anyio
import pytest
import wasmtime
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from spearpy.chat.session import ChatSession
from spearpy.errors import HostInterrupt
from spearpy.host import Host
from spearpy.mcp.bridge import BridgeClosed, GuestBridge
from spearpy.mcp.serve import GuestToolServer, ServeError
from spearpy.observe import events as ev

ROOT = Path(__file__).resolve().parent.parent
MULTI = ROOT / "wasm-samples" / "c_multi_tool.wasm"
MULTI_SCRIPT = ROOT / "wasm-samples" / "scripts" / "multi_tool.json"
SERVE = [sys.executable, "-m", "spearpy.cli.mcp_cmd", "serve"]


def _wat_string(text: str) -> str:
    return "".join(f"\\{byte:02x}" for byte in text.encode())


def _schema(name: str, description: str, properties: dict[str, Any]) -> str:
    return json.dumps({"name": name, "description": description,
                       "parameters": {"type": "object", "properties": properties}})


# Table slots 0..3: echo (copies its arguments), boom (traps), spin (never
# returns), nested (sends on a session of its own: "y" when it got a response fd).
_SCHEMAS = [_schema("echo", "Echo the arguments.", {"text": {"type": "string"}}),
            _schema("boom", "Trap.", {}), _schema("spin", "Loop forever.", {}),
            _schema("nested", "Ask the model in a session of its own.", {})]


def _hostile_wat() -> str:
    data, writes, offset = [], [], 1024
    for slot, schema in enumerate(_SCHEMAS):
        data.append(f'(data (i32.const {offset}) "{_wat_string(schema)}")')
        writes.append(f"(drop (call $write_fn (local.get $fd) (i32.const {slot}) "
                      f"(i32.const {offset}) (i32.const {len(schema.encode())})))")
        offset += (len(schema.encode()) + 15) // 16 * 16
    return f"""
(module
  (import "spear" "cchat_create" (func $create (result i32)))
  (import "spear" "cchat_write_fn" (func $write_fn (param i32 i32 i32 i32) (result i32)))
  (import "spear" "cchat_send" (func $send (param i32 i32) (result i32)))
  (import "spear" "cchat_write_msg" (func $write_msg (param i32 i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 2)
  (data (i32.const 16) "user")
  {" ".join(data)}
  (table (export "__indirect_function_table") 4 funcref)
  (elem (i32.const 0) $echo $boom $spin $nested)
  (func $echo (param $a i32) (param $n i32) (param $o i32) (param $lp i32) (result i32)
    (if (i32.gt_u (local.get $n) (i32.load (local.get $lp)))
      (then (i32.store (local.get $lp) (local.get $n)) (return (i32.const -28))))
    (memory.copy (local.get $o) (local.get $a) (local.get $n))
    (i32.store (local.get $lp) (local.get $n))
    (i32.const 0))
  (func $boom (param i32 i32 i32 i32) (result i32) unreachable)
  (func $spin (param i32 i32 i32 i32) (result i32) (loop $l (br $l)) (i32.const 0))
  (func $nested (param i32 i32) (param $o i32) (param $lp i32) (result i32) (local $fd i32)
    (local.set $fd (call $create))
    (drop (call $write_msg (local.get $fd) (i32.const 16) (i32.const 4) (i32.const 16)
                           (i32.const 4)))
    (i32.store8 (local.get $o)
      (select (i32.const 121) (i32.const 110)
              (i32.ge_s (call $send (local.get $fd) (i32.const 0)) (i32.const 1000))))
    (i32.store (local.get $lp) (i32.const 1))
    (i32.const 0))
  ;; one block for every call: calls into a guest never overlap
  (func (export "spear_alloc") (param $size i32) (result i32)
    (if (result i32) (i32.le_u (local.get $size) (i32.const 65536))
      (then (i32.const 65536)) (else (i32.const 0))))
  (func (export "spear_free") (param i32 i32))
  (func (export "register") (local $fd i32)
    (local.set $fd (call $create))
    {" ".join(writes)}
    (drop (call $send (local.get $fd) (i32.const 2))))
  (func (export "register_none")
    (drop (call $send (call $create) (i32.const 2))))
  ;; _start registers nothing and never sends: serving it needs --invoke
  (func (export "_start")))
"""


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("serve") / "hostile.wasm"
    path.write_bytes(bytes(wasmtime.wat2wasm(_hostile_wat())))
    return path


def _text(result: Any) -> str:
    (block,) = result.content
    return str(block.text)


# ---- stdio: the C sample, against what the loop gets -------------------------


@pytest.fixture(scope="module")
def loop_calls() -> list[tuple[str, dict[str, Any], str]]:
    """(tool, arguments, tool message) of every call c_multi_tool's auto loop made."""
    with Host(cache_dir=None, backend=f"scripted:{MULTI_SCRIPT}", model="scripted") as host:
        result = host.run(MULTI, collect_events=True)
    assert result.exit_code == 0, result.stdout
    starts = {e.data["tool_call_id"]: e for e in result.events if e.kind == ev.TOOL_START}
    calls = []
    for end in (e for e in result.events if e.kind == ev.TOOL_END):
        start = starts[end.data["tool_call_id"]]
        calls.append((end.data["name"], json.loads(start.content["arguments"]),
                      end.content["output"]))
    assert [name for name, _, _ in calls] == ["add", "mul", "add", "upper"]
    return calls


def test_an_sdk_client_over_stdio_gets_what_the_loop_gets(
        loop_calls: list[tuple[str, dict[str, Any], str]], tmp_path: Path) -> None:
    errlog = tmp_path / "server-stderr.txt"

    async def session() -> dict[str, Any]:
        params = StdioServerParameters(command=SERVE[0], args=[*SERVE[1:], str(MULTI)],
                                       cwd=str(ROOT))
        seen: dict[str, Any] = {}
        with errlog.open("w") as err:
            async with stdio_client(params, errlog=err) as (read, write), \
                    ClientSession(read, write) as client:
                seen["init"] = await client.initialize()
                seen["tools"] = (await client.list_tools()).tools
                seen["calls"] = [await client.call_tool(name, args)
                                 for name, args, _ in loop_calls]
                seen["invalid"] = await client.call_tool("add", {"a": "two"})
                with pytest.raises(MCPError, match="unknown tool"):
                    await client.call_tool("divide", {"a": 1, "b": 2})
        return seen

    seen = anyio.run(session)
    assert seen["init"].server_info.name == "c_multi_tool"
    tools = {tool.name: tool for tool in seen["tools"]}
    assert list(tools) == ["add", "mul", "upper"]
    assert tools["add"].description == "a + b"
    assert tools["add"].input_schema == {"type": "object", "properties": {
        "a": {"type": "integer"}, "b": {"type": "integer"}}, "required": ["a", "b"]}
    assert tools["upper"].input_schema["required"] == ["text"]
    for (name, args, expected), result in zip(loop_calls, seen["calls"], strict=True):
        assert not result.is_error, (name, args, result)
        assert _text(result) == expected, (name, args)
    assert seen["invalid"].is_error
    assert json.loads(_text(seen["invalid"]))["error"]["code"] == "invalid_arguments"
    # The guest's printf went to the server's stderr, never onto the wire.
    log = errlog.read_text()
    assert "tool add(2, 3)" in log and "tool upper(DONE)" in log
    assert "serving 3 tools (add, mul, upper) over stdio" in log


# ---- streamable HTTP: a hostile guest ----------------------------------------


@pytest.fixture(scope="module")
def http_server(hostile: Path) -> Iterator[tuple[subprocess.Popen[str], str]]:
    proc = subprocess.Popen([*SERVE, str(hostile), "--invoke", "register", "--http",
                             "127.0.0.1:0", "--tool-timeout", "0.5"],
                            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True)
    assert proc.stderr is not None
    url = None
    deadline = time.monotonic() + 60
    while url is None and time.monotonic() < deadline:
        line = proc.stderr.readline()
        if not line:
            break
        found = re.search(r"on (http://127\.0\.0\.1:\d+/mcp)", line)
        url = found.group(1) if found else None
    if url is None:
        proc.kill()
        pytest.fail(f"the server did not start: {proc.stderr.read()}")
    yield proc, url
    if proc.poll() is None:
        proc.kill()
        proc.wait()


async def _over_http(url: str, body: Any) -> Any:
    async with streamable_http_client(url) as (read, write), \
            ClientSession(read, write) as client:
        await client.initialize()
        return await body(client)


def test_http_lists_the_guests_schemas(http_server: tuple[Any, str]) -> None:
    async def body(client: ClientSession) -> Any:
        return (await client.list_tools()).tools

    tools = anyio.run(_over_http, http_server[1], body)
    assert [(t.name, t.description) for t in tools] == [
        ("echo", "Echo the arguments."), ("boom", "Trap."), ("spin", "Loop forever."),
        ("nested", "Ask the model in a session of its own.")]
    assert tools[0].input_schema == {"type": "object", "properties": {"text": {"type": "string"}}}


def test_a_trap_or_a_slow_tool_fails_only_that_call(http_server: tuple[Any, str]) -> None:
    async def body(client: ClientSession) -> list[Any]:
        started = time.monotonic()
        results = [await client.call_tool("boom", {}), await client.call_tool("spin", {}),
                   await client.call_tool("echo", {"text": "still here"})]
        return [*results, time.monotonic() - started]

    boom, spin, echo, elapsed = anyio.run(_over_http, http_server[1], body)
    assert boom.is_error and spin.is_error and not echo.is_error
    boom_error = json.loads(_text(boom))["error"]
    assert boom_error["code"] == "tool_exec_failed" and "trap" in boom_error["message"]
    spin_error = json.loads(_text(spin))["error"]
    assert spin_error["code"] == "tool_exec_failed" and "deadline" in spin_error["message"]
    assert json.loads(_text(echo)) == {"text": "still here"}
    assert elapsed < 10  # the spin was stopped at its 0.5 s deadline


def test_concurrent_calls_take_turns_on_the_guests_thread(http_server: tuple[Any, str]) -> None:
    async def body(client: ClientSession) -> list[Any]:
        return list(await asyncio.gather(*(client.call_tool("echo", {"text": f"n{i}"})
                                           for i in range(12))))

    results = anyio.run(_over_http, http_server[1], body)
    assert [json.loads(_text(r)) for r in results] == [{"text": f"n{i}"} for i in range(12)]


def test_sigterm_stops_the_server_and_the_guest_cleanly(
        http_server: tuple[subprocess.Popen[str], str]) -> None:
    proc, _url = http_server
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=20) == 0


# ---- registration ------------------------------------------------------------


def test_a_guest_that_never_sends_cannot_be_served(hostile: Path) -> None:
    proc = subprocess.run([*SERVE, str(hostile)], cwd=ROOT, capture_output=True, text=True,
                          timeout=60, stdin=subprocess.DEVNULL)
    assert proc.returncode == 1
    assert "ended before its first cchat_send" in proc.stderr
    assert proc.stdout == ""  # nothing ever reached the wire


def test_in_process_server_stops_the_run_and_refuses_later_calls(hostile: Path,
                                                                 tmp_path: Path) -> None:
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"default": {"content": "from the model"}}))
    with Host(cache_dir=None, backend=f"scripted:{script}", model="scripted") as host:
        with pytest.raises(ServeError, match="registered no tool"):
            GuestToolServer(host, hostile, invoke="register_none").start()
        server = GuestToolServer(host, hostile, invoke="register")
        assert [t.name for t in server.start()] == ["echo", "boom", "spin", "nested"]
        ok = anyio.run(server.call_tool, "echo", {"text": "hi"})
        # A tool's own send goes to the model as in the loop, the server stays up.
        nested = anyio.run(server.call_tool, "nested", {})
        again = anyio.run(server.call_tool, "echo", {"text": "again"})
        result = server.close()
        assert result is not None and result.outcome == "cancelled"
        assert "MCP server shut down" in result.message
        late = anyio.run(server.call_tool, "echo", {"text": "hi"})
    assert not ok.is_error and json.loads(_text(ok)) == {"text": "hi"}
    assert (nested.is_error, _text(nested)) == (False, "y")
    assert json.loads(_text(again)) == {"text": "again"}
    assert late.is_error and "not running" in _text(late)


def test_stopping_ends_a_call_in_progress_at_once(hostile: Path) -> None:
    with Host(cache_dir=None, tool_timeout=120) as host:
        server = GuestToolServer(host, hostile, invoke="register")
        server.start()
        spinning = server._bridge.submit("spin", {})
        time.sleep(0.3)  # let it start spinning
        started = time.monotonic()
        result = server.close()
        took = time.monotonic() - started
    assert result is not None and result.outcome == "cancelled"
    assert took < 3.0  # not the 5 s grace, let alone the 120 s tool timeout
    answer = spinning.result(timeout=5)
    assert answer.is_error and answer.error_code == "tool_exec_failed"


def test_a_call_taken_as_the_run_ends_fails_instead_of_waiting_forever() -> None:
    bridge = GuestBridge()
    session = ChatSession(1000)
    session.registry.add("echo", 0, {"type": "function", "function": {
        "name": "echo", "parameters": {"type": "object"}}})
    queued = bridge.submit("echo", {})  # before the guest even reached its send
    ending = SimpleNamespace(interrupts=SimpleNamespace(run_reason=lambda: ("cancelled", "gone")))
    with pytest.raises(HostInterrupt, match="gone"):
        bridge.hook(ending, session, 0)  # type: ignore[arg-type]
    with pytest.raises(BridgeClosed, match="gone"):
        queued.result(timeout=5)
    with pytest.raises(BridgeClosed, match="gone"):
        bridge.submit("echo", {}).result(timeout=5)
    assert [t.name for t in bridge.tools] == ["echo"]


def test_the_module_runs_as_a_script() -> None:
    proc = subprocess.run([*SERVE, "--help"], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "COLUMNS": "200"})
    assert proc.returncode == 0 and "--invoke" in proc.stdout and "--http" in proc.stdout
