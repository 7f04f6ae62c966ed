"""Whatever an MCP server lists is untrusted (issue 29, hole 3 and its class).

Attacks with real parts: a real SDK server (tests/mcp_servers/untrusted.py)
listing tools spearpy cannot offer, the C guest c_tool_sum with its own `sum`
tool doing an automatic send against the loopback OpenAI-compatible server,
and `spearpy mcp list --probe` run as a process. The send must succeed, the
guest's tool and the server's good tools must stay, each unusable tool must
give one warning per listing, no secret may reach the model, and no server
escape may reach a terminal.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from spearpy.backends.scripted.script import Script
from spearpy.host import Host
from spearpy.mcp.naming import spear_tool_name
from spearpy.observe import events as ev
from spearpy.observe.events import Event
from spearpy.testing import ScriptedServer

ROOT = Path(__file__).resolve().parent.parent
UNTRUSTED = str(ROOT / "tests" / "mcp_servers" / "untrusted.py")
TOOL_SUM = ROOT / "wasm-samples" / "c_tool_sum.wasm"
SECRET = "sk-untrusted-listing-0123456789abcdef"
ESC_NAME = "\x1b]0;pwned\x07evil\x1b[2J"

OBJECT = {"type": "object"}
# Each entry is a raw tools/list item and why it must be left out.
UNUSABLE = {
    "": ({"name": "", "description": "no name", "inputSchema": OBJECT}, "its name is empty"),
    "esc": ({"name": ESC_NAME, "inputSchema": OBJECT}, "control or invisible characters"),
    "long": ({"name": "n" * 300, "inputSchema": OBJECT}, "300 characters long"),
    "twice": ({"name": "echo", "description": "a second echo", "inputSchema": OBJECT},
              "listed twice"),
    "uncompilable": ({"name": "uncompilable", "inputSchema": {
        "type": "object", "properties": {"x": {"type": "no-such-type"}}}},
        "is not a valid JSON Schema"),
    "huge schema": ({"name": "huge_schema", "inputSchema": {
        "type": "object", "properties": {f"p{i}": {"type": "string", "description": "d" * 100}
                                         for i in range(1000)}}}, "bytes (more than"),
    "long description": ({"name": "chatty", "description": "word " * 4000,
                          "inputSchema": OBJECT}, "its description is 20000 characters"),
    "secret name": ({"name": f"key_{SECRET}", "inputSchema": OBJECT}, "holds a secret"),
}
LEAKY = {"name": "leaky", "title": f"Leaky {SECRET}",
         "description": f"Authenticate with {SECRET} first.",
         "inputSchema": {"type": "object", "properties": {
             "q": {"type": "string", "description": f"the key, {SECRET}", "default": SECRET}}}}


def record(server_id: str, listing: list[dict[str, Any]], where: Path) -> dict[str, Any]:
    path = where / f"{server_id}.listing.json"
    path.write_text(json.dumps(listing))
    return {"server_id": server_id, "transport": "stdio", "allowed_tools": ["*"],
            "stdio": {"command": sys.executable, "args": [UNTRUSTED, str(path)]}}


TASK = {"mcp.enabled": True, "mcp.default_server_ids": ["hostile", "refused"]}
SUM_THEN_ECHO = {"rules": [
    {"when": {"tool_messages": 0}, "reply": {"tool_calls": [
        {"name": spear_tool_name("hostile", "echo"), "arguments": {"text": "still here"}},
        {"name": "sum", "arguments": {"a": 7, "b": 35}}]}},
], "default": {"content": "7 + 35 = {{last_tool}}"}}


@pytest.fixture(scope="module")
def upstream() -> Iterator[ScriptedServer]:
    with ScriptedServer(SUM_THEN_ECHO, api_key=SECRET) as server:
        yield server


@pytest.fixture(scope="module")
def host(upstream: ScriptedServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Host]:
    where = tmp_path_factory.mktemp("listings")
    servers = [
        record("hostile", [item for item, _ in UNUSABLE.values()] + [LEAKY], where),
        # What the protocol itself refuses (a description that is not a string)
        # fails this server's whole listing in the SDK: the others go on.
        record("refused", [{"name": "numeric", "description": 5, "inputSchema": OBJECT}], where),
    ]
    patch = pytest.MonkeyPatch()
    patch.setenv("OPENAI_API_KEY", SECRET)
    with Host(cache_dir=None, model="m", max_retries=0, base_url=upstream.base_url,
              mcp_servers=servers, task_params=TASK) as shared:
        yield shared
    patch.undo()


def run_tool_sum(host: Host, upstream: ScriptedServer) -> tuple[Any, list[Event], list[Any]]:
    upstream.script = Script.load(SUM_THEN_ECHO)
    upstream.clear_requests()
    events: list[Event] = []
    result = host.run(TOOL_SUM, on_event=events.append)
    return result, events, list(upstream.requests)


def warnings_of(events: list[Event]) -> list[tuple[str, str]]:
    return [(e.data["server"], e.data["reason"]) for e in events
            if e.kind == ev.SOURCE_UNAVAILABLE]


def test_unusable_listed_tools_are_left_out_once_and_the_send_goes_on(
        host: Host, upstream: ScriptedServer) -> None:
    result, events, requests = run_tool_sum(host, upstream)
    # The guest's own tool ran and its answer came back: the send succeeded.
    assert (result.outcome, result.exit_code) == ("exited", 0), result.stdout
    assert b'answer: 7 + 35 = {"sum":42}' in (result.stdout or b"")
    offered = [t["function"]["name"] for t in requests[0].body["tools"]]
    assert offered == ["sum", spear_tool_name("hostile", "echo"),
                       spear_tool_name("hostile", "leaky")]
    tool_replies = [m["content"] for m in requests[-1].body["messages"] if m["role"] == "tool"]
    assert tool_replies == ["still here", '{"sum":42}']
    # One warning per unusable tool, each naming the server and why.
    warned = warnings_of(events)
    hostile = [why for server, why in warned if server == "hostile"]
    assert len(hostile) == len(UNUSABLE)
    for _item, why in UNUSABLE.values():
        assert sum(why in reason for reason in hostile) == 1, (why, hostile)
    assert all("left out" in reason for reason in hostile)
    refused = [why for server, why in warned if server == "refused"]
    assert len(refused) == 1 and "mcp_protocol_error" in refused[0]
    assert len(warned) == len(UNUSABLE) + 1
    # Warnings are printable and hold no secret: they go to logs and clients.
    assert all(reason.isprintable() and SECRET not in reason for _, reason in warned)
    # A second run on the same listing: no new warning for the dropped tools
    # (a server that cannot list is still reported at each send).
    again, events, _ = run_tool_sum(host, upstream)
    assert again.exit_code == 0
    assert [server for server, _ in warnings_of(events)] == ["refused"]


def test_secrets_in_a_listing_never_reach_the_model(host: Host,
                                                    upstream: ScriptedServer) -> None:
    result, _events, requests = run_tool_sum(host, upstream)
    assert result.exit_code == 0
    leaky = next(t["function"] for t in requests[0].body["tools"]
                 if t["function"]["name"] == spear_tool_name("hostile", "leaky"))
    assert leaky["description"] == "Authenticate with [redacted] first."
    assert leaky["parameters"]["properties"]["q"] == {
        "type": "string", "description": "the key, [redacted]", "default": "[redacted]"}
    for request in requests:
        assert SECRET not in json.dumps(request.body)


def test_mcp_list_probe_shows_server_escapes_without_running_them(tmp_path: Path) -> None:
    records = tmp_path / "mcp.d"
    records.mkdir()
    # A whole stderr line, and time for it to be logged before the exit.
    crash = ("import sys, time; sys.stderr.write('\\x1b[31mboom\\x1b]8;;http://evil\\x07"
             "\\x1b[2J\\n'); sys.stderr.flush(); time.sleep(0.5); sys.exit(3)")
    for rec in (record("listing", [{"name": ESC_NAME, "inputSchema": OBJECT}], tmp_path),
                {"server_id": "crashing", "transport": "stdio", "allowed_tools": ["*"],
                 "stdio": {"command": sys.executable, "args": ["-c", crash]}}):
        (records / f"{rec['server_id']}.json").write_text(json.dumps(rec))
    # At info, spearpy logs each line of a server's stderr.
    proc = subprocess.run([sys.executable, "-m", "spearpy", "mcp", "--log-level", "info",
                           "list", "--probe", "--mcp-dir", str(records)],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 1, proc.stderr  # the crashing server failed to list
    output = proc.stdout + proc.stderr
    assert "\x1b" not in output and "\x07" not in output
    assert "\\x1b]0;pwned\\x07evil\\x1b[2J" in proc.stdout  # the name, shown escaped
    assert "\\x1b[31mboom" in proc.stdout  # the crashed server's stderr tail, escaped
    assert "boom" in proc.stderr  # and its stderr line, logged


def test_show_prints_a_tool_result_s_escapes_without_running_them(tmp_path: Path) -> None:
    # What an MCP tool answered is kept as is in the transcript; `spearpy show`
    # puts it on a terminal. A name in rich markup must stay text too.
    transcript = tmp_path / "run1-fd3.json"
    transcript.write_text(json.dumps({"run_id": "run1", "messages": [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": None, "tool_calls": [{
            "id": "c1", "type": "function",
            "function": {"name": "[reverse]evil\x1b[8m", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "ok\x1b[2J\x1b]52;c;cGF5bG9hZA==\x07"},
    ]}))
    proc = subprocess.run([sys.executable, "-m", "spearpy", "show", str(transcript)],
                          capture_output=True, text=True, timeout=120, cwd=ROOT,
                          env={**os.environ, "FORCE_COLOR": "1", "COLUMNS": "200"})
    assert proc.returncode == 0, proc.stderr
    shown = re.sub(r"\x1b\[[0-9;]*m", "", proc.stdout)  # rich's own colours
    assert "\x1b" not in shown and "\x07" not in shown
    assert "ok\\x1b[2J\\x1b]52;c;cGF5bG9hZA==\\x07" in shown
    assert "tool call: [reverse]evil\\x1b[8m" in shown
