"""The published npm server @modelcontextprotocol/server-filesystem, run with
node from the project-local install (tools/setup_node.sh), under SPEAR's own
fs.toml record with only the launch changed: npx would download it at run
time. Listed and called through McpManager and through the auto tool loop;
a path outside the allowed directory is refused by the server."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from spearpy import abi
from spearpy.cli.mcp_cmd import mcp
from spearpy.context import RunOptions
from spearpy.host import Host
from spearpy.mcp import McpManager, load_registry
from spearpy.mcp.naming import spear_tool_name
from spearpy.testing import ScriptedServer
from spearpy.testing.instance import LiveInstance
from tests.probe import Probe, wat_module

ROOT = Path(__file__).resolve().parent.parent
INDEX = ROOT / ".npm-mcp" / "node_modules" / "@modelcontextprotocol" / "server-filesystem" \
    / "dist" / "index.js"

# SPEAR's config/sms/mcp.d/fs.toml, unchanged.
SPEAR_FS = """\
server_id = "fs"
display_name = "Filesystem"
transport = "stdio"
tool_namespace = ""
allowed_tools = ["read_*", "list_*", "stat_*", "search_*"]

[stdio]
command = "npx"
args = ["-y", "@modelcontextprotocol/server-filesystem", "./"]
cwd = ""

[budgets]
tool_timeout_ms = 8000
"""

pytestmark = pytest.mark.skipif(
    not INDEX.is_file() or shutil.which("node") is None,
    reason="@modelcontextprotocol/server-filesystem is not installed: run tools/setup_node.sh")


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("fs")
    allowed, outside = base / "allowed", base / "outside"
    (allowed / "notes").mkdir(parents=True)
    outside.mkdir()
    (allowed / "hello.txt").write_text("hello from the filesystem server\n")
    (allowed / "notes" / "todo.md").write_text("- ship it\n")
    (outside / "secret.txt").write_text("not for you\n")
    # SPEAR's record with the launch pointed at the local install: node runs
    # dist/index.js, `./` is the allowed directory, resolved against cwd.
    record = SPEAR_FS.replace('command = "npx"', 'command = "node"').replace(
        'args = ["-y", "@modelcontextprotocol/server-filesystem", "./"]',
        f"args = [{json.dumps(str(INDEX))}, \"./\"]").replace(
        'cwd = ""', f"cwd = {json.dumps(str(allowed))}")
    registry = base / "mcp.d"
    registry.mkdir()
    (registry / "fs.toml").write_text(record)
    return {"allowed": allowed.resolve(), "outside": outside.resolve(), "registry": registry}


@pytest.fixture(scope="module")
def manager(tree: dict[str, Path]) -> Iterator[McpManager]:
    registry = load_registry([tree["registry"]])
    assert registry.errors == []
    with McpManager(registry) as shared:
        yield shared


def test_its_tools_are_listed_after_allowed_tools(manager: McpManager) -> None:
    tools = {spec.name: spec for spec in manager.list_tools("fs")}
    assert {"read_file", "read_text_file", "list_directory"} <= set(tools)
    assert "write_file" not in tools and "edit_file" not in tools  # not in allowed_tools
    assert all(name.startswith(("read_", "list_", "stat_", "search_")) for name in tools)
    assert "path" in tools["read_text_file"].input_schema["properties"]


def test_read_file_and_list_directory(manager: McpManager, tree: dict[str, Path]) -> None:
    read = manager.call_tool("fs", "read_text_file",
                             {"path": str(tree["allowed"] / "hello.txt")})
    assert not read.is_error, read.content
    assert read.content.strip() == "hello from the filesystem server"
    listing = manager.call_tool("fs", "list_directory", {"path": str(tree["allowed"])})
    assert not listing.is_error, listing.content
    assert "[FILE] hello.txt" in listing.content and "[DIR] notes" in listing.content


def test_a_path_outside_the_allowed_directory_is_refused(manager: McpManager,
                                                        tree: dict[str, Path]) -> None:
    for path in (tree["outside"] / "secret.txt",
                 tree["allowed"] / ".." / "outside" / "secret.txt"):
        outcome = manager.call_tool("fs", "read_text_file", {"path": str(path)})
        assert outcome.is_error and outcome.code == "mcp_tool_failed"
        assert "not for you" not in outcome.content
        assert "denied" in json.loads(outcome.content)["error"]["message"].lower()
    # And a tool the record does not allow never reaches the server.
    write = manager.call_tool("fs", "write_file", {"path": str(tree["allowed"] / "x"),
                                                   "content": "x"})
    assert write.code == "mcp_denied" and not (tree["allowed"] / "x").exists()


def test_the_loop_reads_and_lists_through_the_server(tree: dict[str, Path]) -> None:
    read, listing = spear_tool_name("fs", "read_file"), spear_tool_name("fs", "list_directory")
    script = {"rules": [{"when": {"tool_messages": 0}, "reply": {"tool_calls": [
        {"name": read, "arguments": {"path": str(tree["allowed"] / "notes" / "todo.md")}},
        {"name": listing, "arguments": {"path": str(tree["allowed"])}},
        {"name": read, "arguments": {"path": str(tree["outside"] / "secret.txt")}}]}}],
        "default": {"content": "done"}}
    with ScriptedServer(script) as upstream, \
            Host(cache_dir=None, model="m", max_retries=0, base_url=upstream.base_url,
                 mcp_dirs=[tree["registry"]],
                 task_params={"mcp.enabled": True, "mcp.default_server_ids": ["fs"]}) as host:
        probe = Probe.__new__(Probe)
        options = RunOptions(capture_output=True, task=host.task_policy)
        LiveInstance.__init__(probe, host, host.load(wat_module("probe.wat")), options)
        try:
            fd = probe.hc("cchat_create")
            assert probe.write_msg(fd, "user", "read my notes") == 0
            body = probe.recv_json(probe.hc("cchat_send", fd, abi.SEND_AUTO_TOOL_CALL))
        finally:
            probe.close()
        requests = list(upstream.requests)
    assert body["choices"][0]["message"]["content"] == "done"
    offered = {t["function"]["name"] for t in requests[0].body["tools"]}
    assert {read, listing} <= offered and spear_tool_name("fs", "write_file") not in offered
    replies: list[Any] = [m["content"] for m in requests[-1].body["messages"]
                          if m["role"] == "tool"]
    assert replies[0].strip() == "- ship it"
    assert "[FILE] hello.txt" in replies[1]
    refused = json.loads(replies[2])["error"]
    assert refused["code"] == "mcp_tool_failed" and "not for you" not in replies[2]


def test_spears_own_fs_toml_parses_and_is_listed_without_running_npx(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    (tmp_path / "fs.toml").write_text(SPEAR_FS)
    registry = load_registry([tmp_path])
    assert registry.errors == []
    record = registry.entries["fs"].record
    assert record.stdio is not None and record.stdio.command == "npx"
    assert record.stdio.args == ["-y", "@modelcontextprotocol/server-filesystem", "./"]
    assert record.stdio.cwd is None and registry.entries["fs"].enabled
    result = CliRunner().invoke(mcp, ["list", "--mcp-dir", str(tmp_path), "--json"])
    (row,) = json.loads(result.stdout)["servers"]
    assert result.exit_code == 0
    assert (row["command"], row["args"], row["started"]) == (
        "npx", ["-y", "@modelcontextprotocol/server-filesystem", "./"], False)
