"""MCP servers as a tool source of the auto tool loop, end to end: a real guest,
the loopback OpenAI-compatible server, real MCP servers (the SDK-written
toolbox over stdio, and the published mcp-server-time)."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from spearpy import abi
from spearpy.backends.scripted.script import Script
from spearpy.context import RunOptions
from spearpy.host import Host
from spearpy.mcp.naming import spear_tool_name
from spearpy.observe import events as ev
from spearpy.observe.events import Event
from spearpy.testing import ScriptedServer
from spearpy.testing.instance import LiveInstance
from tests.probe import Probe, tool_schema, wat_module

TOOLBOX = str(Path(__file__).parent / "mcp_servers" / "toolbox.py")
SECRET = "sk-mcp-loop-secret-0123456789abcdef"
ECHO = spear_tool_name("tb", "echo")
FAIL = spear_tool_name("tb", "fail")
HUGE = spear_tool_name("tb", "huge")
ENV = spear_tool_name("tb", "env")
NOW = spear_tool_name("time", "get_current_time")


def record(server_id: str, args: list[str], **extra: Any) -> dict[str, Any]:
    return {"server_id": server_id, "transport": "stdio", "allowed_tools": ["*"],
            "stdio": {"command": sys.executable, "args": args}, **extra}


SERVER_TOKEN = "ghp_" + "0123456789abcdefghij0123456789ABCDEF"
SERVERS = [record("tb", [TOOLBOX], approval_policy={"per_tool": {"add": "always"}},
                  stdio={"command": sys.executable, "args": [TOOLBOX],
                         "env": {"GITHUB_TOKEN": SERVER_TOKEN}}),
           record("time", ["-m", "mcp_server_time", "--local-timezone", "UTC"]),
           record("broken", ["-c", "import sys; sys.exit(3)"])]
TASK = {"mcp.enabled": True, "mcp.default_server_ids": ["tb", "time", "broken"]}


@pytest.fixture(scope="module")
def upstream() -> Iterator[ScriptedServer]:
    with ScriptedServer({"default": {"content": "idle"}}, api_key=SECRET) as server:
        yield server


@pytest.fixture(scope="module")
def host(upstream: ScriptedServer) -> Iterator[Host]:
    """One Host for the module: its MCP sessions stay warm across tests."""
    patch = pytest.MonkeyPatch()
    patch.setenv("OPENAI_API_KEY", SECRET)
    with Host(cache_dir=None, model="m", max_retries=0, base_url=upstream.base_url,
              mcp_servers=SERVERS, task_params=TASK) as shared:
        shared.upstream = upstream  # type: ignore[attr-defined]
        yield shared
    patch.undo()


def calls_then_answer(*calls: tuple[str, dict[str, Any]]) -> dict[str, Any]:
    return {"rules": [
        {"when": {"tool_messages": 0},
         "reply": {"tool_calls": [{"name": n, "arguments": a} for n, a in calls]}},
    ], "default": {"content": "done: {{last_tool}}"}}


def send(host: Host, script: dict[str, Any], *, params: dict[str, Any] | None = None,
         task: dict[str, Any] | None = None) -> tuple[dict[str, Any], list[Event], Any]:
    server: ScriptedServer = host.upstream  # type: ignore[attr-defined]
    server.script = Script.load(script)
    server.clear_requests()
    events: list[Event] = []
    probe = Probe.__new__(Probe)
    options = RunOptions(capture_output=True, sinks=[events.append],
                         task=host.task_policy if task is None else _task(task))
    LiveInstance.__init__(probe, host, host.load(wat_module("probe.wat")), options)
    try:
        fd = probe.hc("cchat_create")
        for key, value in (params or {}).items():
            assert probe.set_param(fd, key, value) == 0
        assert probe.write_msg(fd, "user", "go") == 0
        body = probe.recv_json(probe.hc("cchat_send", fd, abi.SEND_AUTO_TOOL_CALL))
    finally:
        probe.close()
    return body, events, list(server.requests)


def _task(params: dict[str, Any]) -> Any:
    from spearpy.tools.sources import task_policy

    return task_policy(params)


def tool_replies(requests: list[Any]) -> dict[str, Any]:
    messages = requests[-1].body["messages"]
    return {m["tool_call_id"]: m["content"] for m in messages if m["role"] == "tool"}


def test_mcp_tools_are_offered_and_called_with_real_results(host: Host) -> None:
    body, events, requests = send(host, calls_then_answer(
        (ECHO, {"text": "hello from mcp"}), (NOW, {"timezone": "UTC"})))
    offered = [t["function"]["name"] for t in requests[0].body["tools"]]
    assert ECHO in offered and NOW in offered
    assert not any(name.startswith(spear_tool_name("broken", "x")[:12]) for name in offered)
    replies = list(tool_replies(requests).values())
    assert replies[0] == "hello from mcp"
    assert json.loads(replies[1])["timezone"] == "UTC"
    assert body["choices"][0]["message"]["content"].startswith("done: ")
    starts = [e for e in events if e.kind == ev.TOOL_START]
    assert [(e.data["source"], e.data["server"]) for e in starts] == [("mcp", "tb"),
                                                                     ("mcp", "time")]
    unavailable = [e for e in events if e.kind == ev.SOURCE_UNAVAILABLE]
    assert [e.data["server"] for e in unavailable] == ["broken"]


def test_tool_errors_come_back_in_spears_shape(host: Host) -> None:
    _, _, requests = send(host, calls_then_answer((FAIL, {"message": "no luck"}),
                                                  ("mcp.tb.echo", {"text": "compat"}),
                                                  (ECHO, {"wrong": 1})))
    first, compat, invalid = (json.loads(c) if c.startswith("{") else c
                              for c in tool_replies(requests).values())
    assert first["error"]["code"] == "mcp_tool_failed" and "no luck" in first["error"]["message"]
    assert compat == "compat"  # SPEAR's compatibility name routes to the same tool
    assert invalid["error"]["code"] == "invalid_arguments"  # checked before the server


def test_output_over_the_limit_is_cut_with_a_marker(host: Host) -> None:
    _, _, requests = send(host, calls_then_answer((HUGE, {"size": 50_000})),
                          params={"max_tool_output_bytes": 4096})
    (content,) = tool_replies(requests).values()
    assert len(content.encode()) <= 4096 and content.startswith("xxxx")
    assert "truncat" in content.lower()


def test_a_server_never_sees_the_api_key_and_results_are_scrubbed(host: Host) -> None:
    _, _, requests = send(host, calls_then_answer((ENV, {})))
    (content,) = tool_replies(requests).values()
    assert "PATH" in content and SECRET not in content and "OPENAI_API_KEY" not in content
    # The server got the token its record names, but its answers carry none of it.
    assert "GITHUB_TOKEN" in content and SERVER_TOKEN not in content


def test_the_session_narrows_and_cannot_widen(host: Host) -> None:
    _, _, requests = send(host, calls_then_answer((NOW, {"timezone": "UTC"})),
                          task={"mcp.enabled": True, "mcp.default_server_ids": ["tb"],
                                "mcp.allowed_server_ids": ["tb"],
                                "mcp.tool_denylist": ["huge*"]})
    offered = {t["function"]["name"] for t in requests[0].body["tools"]}
    assert ECHO in offered and HUGE not in offered and NOW not in offered
    (content,) = tool_replies(requests).values()
    assert json.loads(content)["error"]["code"] == "unknown_tool"


def test_mcp_is_off_unless_the_task_enables_it(host: Host) -> None:
    _, _, requests = send(host, {"default": {"content": "plain"}}, task={})
    assert "tools" not in requests[0].body


def test_a_call_the_approval_policy_holds_comes_back_pending(host: Host) -> None:
    add = spear_tool_name("tb", "add")
    body, events, requests = send(host, calls_then_answer((add, {"a": 1, "b": 2})))
    assert len(requests) == 1  # held: no second completion
    assert body["_spear"]["held"]["name"] == add
    assert [c["function"]["name"] for c in body["choices"][0]["message"]["tool_calls"]] == [add]
    assert not any(e.kind == ev.TOOL_START and e.data.get("executed") for e in events)


def test_the_guest_narrows_with_spears_session_params(host: Host) -> None:
    _, _, requests = send(host, calls_then_answer((ECHO, {"text": "narrowed"})),
                          params={"mcp.server_ids": ["tb"], "mcp.tool_allowlist": ["ec*"]})
    offered = [t["function"]["name"] for t in requests[0].body["tools"]]
    assert offered == [ECHO]
    assert list(tool_replies(requests).values()) == ["narrowed"]


def test_session_params_return_spears_errnos(host: Host) -> None:
    probe = Probe.__new__(Probe)
    LiveInstance.__init__(probe, host, host.load(wat_module("probe.wat")),
                          RunOptions(capture_output=True, task=host.task_policy))
    try:
        fd = probe.hc("cchat_create")
        assert probe.set_param(fd, "mcp.server_ids", ["tb", "elsewhere"]) == abi.EACCES
        assert probe.set_param(fd, "mcp.task_tool_allowlist", ["*"]) == abi.EACCES
        assert probe.set_param(fd, "mcp.enabled", "yes") == abi.EINVAL
        assert probe.set_param(fd, "mcp.tool_denylist", ["a", 1]) == abi.EINVAL
        assert probe.set_param(fd, "mcp.enabled", True) == 0
        # A guest tool may not take a name MCP tools are offered under.
        assert probe.write_fn(fd, 0, tool_schema(ECHO)) == abi.EINVAL
        assert probe.write_fn(fd, 0, tool_schema("mcp_h_x")) == abi.EINVAL
        assert probe.write_fn(fd, 0, tool_schema("mcp_ok")) == 0
    finally:
        probe.close()
