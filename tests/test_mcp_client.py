"""McpManager against real MCP servers: the SDK-written toolbox over stdio and
streamable HTTP (SSE and JSON replies), and the published mcp-server-time.

Server processes are shared per module; tests that break a server (crash,
flood) rely on the manager restarting it, which is itself under test.
"""

from __future__ import annotations

import gc
import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import structlog

from spearpy.mcp import Approval, McpError, McpManager, SessionPolicy, TaskPolicy, load_registry
from spearpy.mcp.naming import spear_tool_name
from spearpy.mcp.transports import STDERR_LOG_BUDGET
from spearpy.observe.logger import get_logger

TOOLBOX = str(Path(__file__).parent / "mcp_servers" / "toolbox.py")
SECRET = "sk-test-mcp-0123456789abcdef"


def stdio(server_id: str, args: list[str], **extra: Any) -> dict[str, Any]:
    record: dict[str, Any] = {"server_id": server_id, "transport": "stdio",
                              "allowed_tools": ["*"],
                              "stdio": {"command": sys.executable, "args": args}}
    record.update(extra)
    return record


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def wait_port(port: int, proc: subprocess.Popen[bytes], timeout: float = 60.0) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise RuntimeError(f"HTTP test server exited with {proc.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError("HTTP test server did not start")


def alive(pid: int | None) -> bool:
    if pid is None:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.fixture(scope="module")
def http_servers(tmp_path_factory: pytest.TempPathFactory,
                 ) -> Iterator[dict[str, tuple[int, subprocess.Popen[bytes]]]]:
    """The toolbox over streamable HTTP: SSE replies and JSON replies."""
    logs = tmp_path_factory.mktemp("mcp-http")
    servers = {}
    for mode in ("sse", "json"):
        port = free_port()
        with open(logs / f"{mode}.log", "wb") as log:
            servers[mode] = (port, subprocess.Popen(
                [sys.executable, TOOLBOX, "--http", str(port)]
                + (["--json-response"] if mode == "json" else []),
                stdout=subprocess.DEVNULL, stderr=log))
    try:
        for mode, (port, proc) in servers.items():
            try:
                wait_port(port, proc)
            except RuntimeError as exc:
                raise RuntimeError(f"{exc}: {(logs / f'{mode}.log').read_text()[-2000:]}") from None
        yield servers
    finally:
        for _port, proc in servers.values():
            proc.kill()
            proc.wait()


@pytest.fixture(scope="module")
def manager(http_servers: dict[str, tuple[int, subprocess.Popen[bytes]]],
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[McpManager]:
    http_ports = {mode: port for mode, (port, _proc) in http_servers.items()}
    workdir = tmp_path_factory.mktemp("mcp-cwd")
    patch = pytest.MonkeyPatch()
    patch.setenv("OPENAI_API_KEY", SECRET)
    patch.setenv("SPEARPY_TEST_MCP_TOKEN", "tok-42")
    registry = load_registry([], [
        stdio("tb", [TOOLBOX], stdio={"command": sys.executable, "args": [TOOLBOX],
                                      "cwd": str(workdir),
                                      "env": {"TOOL_TOKEN": "${SPEARPY_TEST_MCP_TOKEN}"}},
              budgets={"tool_timeout_ms": 3000}),
        stdio("time", ["-m", "mcp_server_time", "--local-timezone", "UTC"]),
        {"server_id": "web", "transport": "streamable_http", "allowed_tools": ["*"],
         "http": {"url": f"http://127.0.0.1:{http_ports['sse']}/mcp",
                  "headers": {"X-Tenant": "${SPEARPY_TEST_MCP_TOKEN}"}},
         "budgets": {"tool_timeout_ms": 1500}},
        {"server_id": "web_ro", "transport": "streamable_http",
         "allowed_tools": ["echo", "a?d", "sleep"],
         "http": {"url": f"http://127.0.0.1:{http_ports['sse']}/mcp"},
         "budgets": {"tool_timeout_ms": 1000, "max_concurrency": 1}},
        {"server_id": "web_json", "transport": "streamable_http", "allowed_tools": ["*"],
         "http": {"url": f"http://127.0.0.1:{http_ports['json']}/mcp"}},
        stdio("gone", ["-c", "import sys; sys.stderr.write('nope\\n'); sys.exit(7)"]),
        {"server_id": "missing", "transport": "stdio", "allowed_tools": ["*"],
         "stdio": {"command": "/nonexistent/mcp-server"}},
        stdio("slow", ["-c", "import time; time.sleep(60)"], budgets={"list_timeout_ms": 400}),
        stdio("locked", [TOOLBOX], stdio={"command": sys.executable, "args": [TOOLBOX],
                                          "env": {"K": "${SPEARPY_TEST_UNSET_VARIABLE}"}}),
    ])
    assert registry.errors == []
    mgr = McpManager(registry)
    try:
        yield mgr
    finally:
        mgr.close()
        patch.undo()


def call(mgr: McpManager, server: str, tool: str, **args: Any) -> Any:
    return mgr.call_tool(server, tool, args)


# -- stdio: the basics ---------------------------------------------------------


def test_list_and_call_over_stdio(manager: McpManager) -> None:
    tools = {t.name: t for t in manager.list_tools("tb")}
    assert {"echo", "add", "fail", "sleep", "crash", "env"} <= set(tools)
    add = tools["add"]
    assert add.input_schema["required"] == ["a", "b"]
    assert add.to_openai()["function"]["name"] == spear_tool_name("tb", "add")
    assert add.to_openai()["function"]["parameters"] == add.input_schema
    out = call(manager, "tb", "add", a=2, b=40)
    assert (out.content, out.is_error, out.code) == ("42", False, None)
    assert out.duration_ms > 0
    assert call(manager, "tb", "echo", text="héllo").content == "héllo"


def test_tool_error_is_spears_shape(manager: McpManager) -> None:
    out = call(manager, "tb", "fail", message="disk is on fire")
    assert out.is_error and out.code == "mcp_tool_failed"
    body = json.loads(out.content)
    assert body["error"]["code"] == "mcp_tool_failed"
    assert "disk is on fire" in body["error"]["message"]


def test_server_environment_is_minimal_and_has_no_api_key(manager: McpManager) -> None:
    env = json.loads(call(manager, "tb", "env").content)
    assert SECRET not in json.dumps(env)
    assert "OPENAI_API_KEY" not in env
    assert env["TOOL_TOKEN"] == "tok-42"  # what the record names, resolved from the host
    assert set(env) <= {"PATH", "HOME", "LANG", "TOOL_TOKEN"}
    assert env["PATH"] == os.environ["PATH"]


def test_record_cwd_is_used(manager: McpManager) -> None:
    assert Path(call(manager, "tb", "cwd").content).name.startswith("mcp-cwd")


def test_images_are_summarised(manager: McpManager) -> None:
    assert call(manager, "tb", "picture").content == "[image: image/png, 64 bytes]"


def test_argument_and_name_errors(manager: McpManager) -> None:
    manager.list_tools("tb")
    assert call(manager, "tb", "no_such_tool").code == "mcp_unknown_tool"
    assert call(manager, "nowhere", "echo").code == "mcp_unknown_server"
    assert manager.call_tool("tb", "echo", ["not", "an", "object"]).code == \
        "mcp_invalid_arguments"
    bad_types = call(manager, "tb", "add", a="x", b=1)
    assert bad_types.code == "mcp_tool_failed" and bad_types.is_error


def test_allowed_tools_is_enforced_by_the_manager(manager: McpManager) -> None:
    assert [t.name for t in manager.list_tools("web_ro")] == ["echo", "add", "sleep"]
    denied = call(manager, "web_ro", "env")
    assert denied.code == "mcp_denied" and "allowed_tools" in json.loads(denied.content)["error"][
        "message"]
    assert call(manager, "web_ro", "add", a=1, b=1).content == "2"


def test_output_over_the_limit_is_cut_with_a_marker(manager: McpManager) -> None:
    out = call(manager, "tb", "huge", size=200_000, char="é")
    assert not out.is_error and out.truncated
    assert len(out.content.encode()) <= 64 * 1024
    assert out.content.endswith("of 400000 bytes shown]")
    small = manager.call_tool("tb", "huge", {"size": 5000}, max_output_bytes=2048)
    assert small.truncated and len(small.content.encode()) <= 2048


def test_a_100_mb_reply_is_refused_without_holding_it(manager: McpManager) -> None:
    pid = next(s.pid for s in manager.status() if s.server_id == "tb")
    start = time.monotonic()
    out = call(manager, "tb", "huge_raw", megabytes=100)
    assert out.code == "mcp_output_too_large", out.content
    assert "104857" in out.content and time.monotonic() - start < 20
    # The session survives: same process, next call fine.
    assert call(manager, "tb", "echo", text="still here").content == "still here"
    assert next(s.pid for s in manager.status() if s.server_id == "tb") == pid


def test_garbage_on_stdout_is_dropped(manager: McpManager) -> None:
    assert call(manager, "tb", "flood", lines=50).content == "flooded"
    assert call(manager, "tb", "echo", text="ok").content == "ok"


def test_stderr_goes_to_the_log_bounded_and_close_ends_the_server() -> None:
    mgr = McpManager([stdio("noisy", [TOOLBOX])])
    # An earlier test's logging configuration (a deferred one is applied now)
    # may filter below warning, which capture_logs does not undo: the capture
    # runs on structlog's defaults, and the configuration comes back after.
    get_logger("spearpy.mcp")
    saved = structlog.get_config()
    structlog.reset_defaults()
    try:
        with structlog.testing.capture_logs() as logs:
            assert call(mgr, "noisy", "stderr_flood", kib=400).content == "noisy"
            call(mgr, "noisy", "echo", text="sync")  # stderr is drained concurrently
            pid = mgr.status()[0].pid
            assert alive(pid)
            mgr.close()
    finally:
        structlog.configure(**saved)
    lines = [e for e in logs if e["event"] == "mcp server stderr"]
    assert lines and all(e["server_id"] == "noisy" for e in lines)
    assert sum(len(e["line"]) for e in lines) <= STDERR_LOG_BUDGET + 2048
    assert any(e["event"] == "mcp server stderr over budget; the rest is not logged"
               for e in logs)
    assert not alive(pid)
    assert mgr.status()[0].state == "closed"
    assert call(mgr, "noisy", "echo", text="x").code == "mcp_server_unavailable"
    with pytest.raises(McpError):
        mgr.list_tools("noisy")
    mgr.close()  # idempotent


# -- deaths, timeouts, cancellation ---------------------------------------------


def test_timeout_then_the_session_goes_on(manager: McpManager) -> None:
    out = manager.call_tool("tb", "sleep", {"seconds": 10}, timeout_s=0.3)
    assert out.code == "mcp_timeout" and 250 < out.duration_ms < 5000
    assert "300 ms" in out.content
    budget = call(manager, "web", "sleep", seconds=10)  # the record's 1500 ms budget
    assert budget.code == "mcp_timeout" and 1400 < budget.duration_ms < 6000
    assert call(manager, "tb", "echo", text="after").content == "after"


def test_caller_deadline_and_cancel(manager: McpManager) -> None:
    out = manager.call_tool("tb", "sleep", {"seconds": 10}, deadline=time.monotonic() + 0.3)
    assert out.code == "mcp_timeout" and "deadline" in out.content and out.duration_ms < 5000
    real = manager.call_tool("tb", "echo", {"text": "x"})  # a real call's time, for scale
    late = manager.call_tool("tb", "echo", {"text": "x"}, deadline=time.monotonic() - 5)
    # A passed deadline is refused before the call; taken for a wait it would
    # take 5 s. Against a real call's time (a loaded machine slows both), with
    # 2 s of room.
    assert real.content == "x"
    assert late.code == "mcp_timeout" and late.duration_ms < real.duration_ms + 2000
    cancel = threading.Event()
    threading.Timer(0.3, cancel.set).start()
    start = time.monotonic()
    out = manager.call_tool("tb", "sleep", {"seconds": 10}, cancel=cancel)
    assert out.code == "mcp_cancelled" and time.monotonic() - start < 4
    assert call(manager, "tb", "echo", text="alive").content == "alive"


def test_max_concurrency(manager: McpManager) -> None:
    # web_ro allows one call at a time: a second call waits for the slot.
    first: list[Any] = []
    manager.list_tools("web_ro")
    runner = threading.Thread(target=lambda: first.append(
        call(manager, "web_ro", "sleep", seconds=0.9)))
    runner.start()
    time.sleep(0.3)
    second = manager.call_tool("web_ro", "echo", {"text": "b"}, timeout_s=0.3)
    third = manager.call_tool("web_ro", "echo", {"text": "c"})  # waits, then runs
    runner.join()
    assert second.code == "mcp_timeout" and "slots busy" in second.content
    assert first[0].content == "slept 0.9"
    assert third.content == "c" and third.duration_ms > 100
    # The same server under another record (web) has its own slots.
    runner = threading.Thread(target=lambda: call(manager, "web_ro", "sleep", seconds=0.4))
    runner.start()
    time.sleep(0.1)
    assert manager.call_tool("web", "echo", {"text": "d"}, timeout_s=0.25).content == "d"
    runner.join()


def test_many_threads_share_one_session(manager: McpManager) -> None:
    results: dict[int, list[str]] = {}
    before = [t for t in threading.enumerate() if t.name == "spearpy-mcp"]

    def work(n: int) -> None:
        results[n] = [call(manager, "tb", "echo", text=f"{n}-{i}").content for i in range(15)]

    threads = [threading.Thread(target=work, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results == {n: [f"{n}-{i}" for i in range(15)] for n in range(8)}
    after = [t for t in threading.enumerate() if t.name == "spearpy-mcp"]
    assert len(after) == len(before)  # no loop per call


def test_parallel_calls_on_one_session_one_cancelled(manager: McpManager) -> None:
    """Several threads calling one server at once (the loop's parallel tool
    calls): a cancel ends only its own call, the others get their own results."""
    cancel = threading.Event()
    slow: list[Any] = []
    quick: dict[int, list[str]] = {}

    def sleeper() -> None:
        slow.append(manager.call_tool("tb", "sleep", {"seconds": 10}, cancel=cancel))

    def echoes(n: int) -> None:
        quick[n] = [manager.call_tool("tb", "echo", {"text": f"{n}-{i}"}, cancel=threading.Event(),
                                      deadline=time.monotonic() + 30).content for i in range(5)]

    threads = [threading.Thread(target=sleeper)]
    threads += [threading.Thread(target=echoes, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    threads[1].join()
    cancel.set()
    for thread in threads:
        thread.join()
    assert slow[0].code == "mcp_cancelled"
    assert quick == {n: [f"{n}-{i}" for i in range(5)] for n in range(4)}
    assert call(manager, "tb", "echo", text="after").content == "after"


def test_crash_mid_call_then_restart(manager: McpManager) -> None:
    assert call(manager, "tb", "echo", text="warm").content == "warm"
    old_pid = next(s.pid for s in manager.status() if s.server_id == "tb")
    out = call(manager, "tb", "crash", code=3)
    assert out.code == "mcp_server_unavailable"
    assert "exit code 3" in out.content and "crashing on request" in out.content
    assert not alive(old_pid)
    assert call(manager, "tb", "calls").content == "0"  # a fresh process
    row = next(s for s in manager.status() if s.server_id == "tb")
    assert row.state == "ready" and row.pid != old_pid and row.starts >= 2


def test_stdout_flood_breaks_the_session_then_restart(manager: McpManager) -> None:
    out = call(manager, "tb", "flood", lines=12_000)
    assert out.code == "mcp_server_unavailable" and "flooded stdout" in out.content
    assert call(manager, "tb", "echo", text="back").content == "back"


def test_failing_start_backs_off(manager: McpManager) -> None:
    first = call(manager, "gone", "x")
    assert first.code == "mcp_server_unavailable"
    assert "exit code 7" in first.content and "nope" in first.content
    second = call(manager, "gone", "x")  # restarted at once after a first failure
    third = call(manager, "gone", "x")  # then the backoff holds it
    assert second.code == third.code == "mcp_server_unavailable"
    assert "next restart attempt in" in third.content
    row = next(s for s in manager.status() if s.server_id == "gone")
    assert row.starts == 2 and row.state == "failed" and "exit code 7" in (row.last_error or "")


def test_server_that_never_initializes(manager: McpManager) -> None:
    start = time.monotonic()
    with pytest.raises(McpError) as info:
        manager.list_tools("slow")
    assert info.value.code in ("mcp_timeout", "mcp_server_unavailable")
    assert time.monotonic() - start < 8
    deadline = time.monotonic() + 5
    while next(s for s in manager.status() if s.server_id == "slow").state != "failed":
        assert time.monotonic() < deadline
        time.sleep(0.05)
    row = next(s for s in manager.status() if s.server_id == "slow")
    assert "initialize" in (row.last_error or "") and not alive(row.pid)


def test_disabled_server_never_starts(manager: McpManager) -> None:
    out = call(manager, "locked", "echo", text="x")
    assert out.code == "mcp_server_unavailable"
    assert "SPEARPY_TEST_UNSET_VARIABLE is not set" in out.content
    assert "locked" not in manager.server_ids()
    row = next(s for s in manager.status() if s.server_id == "locked")
    assert row.state == "disabled" and row.starts == 0


# -- the published server, HTTP, status ----------------------------------------------


def test_mcp_server_time_for_real(manager: McpManager) -> None:
    assert {t.name for t in manager.list_tools("time")} == {"get_current_time", "convert_time"}
    out = call(manager, "time", "get_current_time", timezone="UTC")
    body = json.loads(out.content)
    assert body["timezone"] == "UTC" and body["datetime"].endswith("+00:00")
    bad = call(manager, "time", "get_current_time", timezone="Nowhere/Bogus")
    assert bad.code == "mcp_tool_failed" and "Nowhere/Bogus" in bad.content


def test_streamable_http(manager: McpManager) -> None:
    assert "echo" in {t.name for t in manager.list_tools("web")}
    assert call(manager, "web", "echo", text="over http").content == "over http"
    sent = json.loads(call(manager, "web", "headers").content)
    assert sent["x-tenant"] == "tok-42"  # record headers, ${VAR} resolved
    assert sent["accept-encoding"] == "identity"  # byte caps count what is read
    assert call(manager, "web_json", "add", a=1, b=2).content == "3"
    for server in ("web", "web_json"):  # SSE events and JSON bodies are both capped
        big = call(manager, server, "huge", size=3_000_000)
        assert big.code == "mcp_output_too_large", (server, big.content)
        assert call(manager, server, "echo", text="ok").content == "ok"


def test_tools_list_changed_refreshes_the_cache(manager: McpManager) -> None:
    assert "late" not in {t.name for t in manager.list_tools("web")}
    assert call(manager, "web", "grow").content == "grown"
    deadline = time.monotonic() + 3
    while "late" not in {t.name for t in manager.list_tools("web")}:
        assert time.monotonic() < deadline, "tools/list was not refreshed"
        time.sleep(0.05)
    assert call(manager, "web", "late").content == "late"


def test_collect_tools_keeps_going_when_one_server_fails(manager: McpManager) -> None:
    found, failed = manager.collect_tools(["time", "gone", "locked", "nowhere", "missing"])
    assert set(found) == {"time"} and set(failed) == {"gone", "locked", "nowhere", "missing"}
    assert failed["nowhere"].code == "mcp_unknown_server"
    assert "cannot start '/nonexistent/mcp-server'" in failed["missing"].message


def test_offered_tools_apply_all_three_layers(manager: McpManager) -> None:
    task = TaskPolicy(enabled=True, default_server_ids=("web_ro",),
                      allowed_server_ids=("web_ro", "time", "gone"), tool_denylist=("sleep",))
    offered, failed = manager.offered_tools(task, SessionPolicy())
    assert [(t.server_id, t.name) for t in offered] == [("web_ro", "echo"), ("web_ro", "add")]
    session = SessionPolicy(server_ids=("time", "gone"), tool_allowlist=("get_*",))
    offered, failed = manager.offered_tools(task, session)
    assert [(t.server_id, t.name) for t in offered] == [("time", "get_current_time")]
    assert set(failed) == {"gone"}  # its failure removes only its tools
    assert manager.offered_tools(TaskPolicy(), SessionPolicy()) == ([], {})


def test_a_warm_offer_is_reused_until_its_listing_or_policy_changes() -> None:
    """A warm send's offer is the cached list; a tools/list_changed, a restart
    or another session policy each give a fresh one."""
    mgr = McpManager([stdio("own", [TOOLBOX], allowed_tools=["echo", "late", "crash", "grow"])])
    task = TaskPolicy(enabled=True, default_server_ids=("own",))
    try:
        first, failed = mgr.offered_tools(task, SessionPolicy())
        assert failed == {} and [t.name for t in first] == ["echo", "crash", "grow"]
        again, _ = mgr.offered_tools(task, SessionPolicy())
        assert again is first  # the warm path: no new list, no trip to the loop
        narrow, _ = mgr.offered_tools(task, SessionPolicy(tool_denylist=("crash",)))
        assert [t.name for t in narrow] == ["echo", "grow"]
        assert mgr.offered_tools(task, SessionPolicy())[0] is first
        # A policy built with a list is taken as its tuples (mcp/policy.py), not refused.
        listed = SessionPolicy(tool_denylist=["crash"])  # type: ignore[arg-type]
        assert [t.name for t in mgr.offered_tools(task, listed)[0]] == ["echo", "grow"]
        assert call(mgr, "own", "grow").content == "grown"
        deadline = time.monotonic() + 5
        while "late" not in [t.name for t in mgr.offered_tools(task, SessionPolicy())[0]]:
            assert time.monotonic() < deadline, "the cached offer outlived tools/list_changed"
            time.sleep(0.05)
        grown, _ = mgr.offered_tools(task, SessionPolicy())
        # Offers made from the older listing are dropped, not kept alive beside it.
        assert list(mgr._offered) == [(task, SessionPolicy())]
        assert call(mgr, "own", "crash", code=3).code == "mcp_server_unavailable"
        # The restarted server lists its tools anew (without `late`): so does the offer.
        after, failed = mgr.offered_tools(task, SessionPolicy())
        assert failed == {} and after is not grown
        assert [t.name for t in after] == ["echo", "crash", "grow"]
    finally:
        mgr.close()


def test_approval_from_the_record(tmp_path: Path) -> None:
    mgr = McpManager([stdio("ap", ["-c", "pass"], approval_policy={
        "default_policy": "never", "per_tool": {"delete_*": "always", "drop": "deny"}})])
    assert mgr.approval("ap", "read") is Approval.ALLOW
    assert mgr.approval("ap", "delete_all") is Approval.ASK
    assert mgr.approval("ap", "drop") is Approval.DENY
    assert mgr.approval("nowhere", "read") is Approval.DENY
    mgr.close()


def test_status_rows(manager: McpManager) -> None:
    rows = {s.server_id: s for s in manager.status(probe=True)}
    assert rows["web_ro"].tools == ("echo", "add", "sleep")
    assert (rows["web_ro"].hidden_tools or 0) > 5
    assert rows["time"].state == "ready" and rows["time"].transport == "stdio"
    assert rows["locked"].disabled_reason is not None


def test_http_server_gone(manager: McpManager,
                          http_servers: dict[str, tuple[int, subprocess.Popen[bytes]]]) -> None:
    # Last of the module's tests: it takes the JSON-mode server away for good.
    proc = http_servers["json"][1]
    proc.kill()
    proc.wait()
    out = call(manager, "web_json", "echo", text="anyone?")
    assert out.code == "mcp_server_unavailable"
    assert call(manager, "web", "echo", text="others live").content == "others live"


def test_a_dropped_manager_still_ends_its_servers() -> None:
    mgr = McpManager([stdio("orphan", ["-m", "mcp_server_time"])])
    assert mgr.list_tools("orphan")
    pid = mgr.status()[0].pid
    assert alive(pid)
    del mgr
    gc.collect()
    assert not alive(pid)
