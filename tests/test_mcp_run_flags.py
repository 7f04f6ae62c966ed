"""`spearpy run` with MCP from the command line: --mcp-dir, --mcp, --mcp-allow
and --task-param build the registry and the task layer."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import click
import pytest

from spearpy.cli.options import task_params_from_options
from spearpy.mcp.naming import spear_tool_name

ROOT = Path(__file__).resolve().parents[1]


def test_short_forms_and_task_params_make_the_task_layer() -> None:
    task = task_params_from_options({
        "mcp": "fs, git", "mcp_allow": "fs,git,fetch",
        "task_param": ('mcp.tool_denylist=["write_*"]', "mcp.enabled=true", "note=plain")})
    assert task == {"mcp.enabled": True, "mcp.default_server_ids": ["fs", "git"],
                    "mcp.allowed_server_ids": ["fs", "git", "fetch"],
                    "mcp.tool_denylist": ["write_*"], "note": "plain"}
    with pytest.raises(click.UsageError, match="KEY=JSON"):
        task_params_from_options({"task_param": ("no-equals-sign",)})


def test_run_calls_a_published_mcp_server_from_the_command_line(tmp_path: Path) -> None:
    records = tmp_path / "mcp.d"
    records.mkdir()
    (records / "time.toml").write_text(
        'server_id = "time"\ntransport = "stdio"\nallowed_tools = ["get_*"]\n'
        f'[stdio]\ncommand = {json.dumps(sys.executable)}\n'
        'args = ["-m", "mcp_server_time", "--local-timezone", "UTC"]\n')
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"rules": [
        {"when": {"tool_messages": 0}, "reply": {"tool_calls": [
            {"name": spear_tool_name("time", "get_current_time"),
             "arguments": {"timezone": "UTC"}}]}}],
        "default": {"content": "the server said {{last_tool}}"}}))
    base = [sys.executable, "-m", "spearpy", "run", "-q", "--no-cache", "--backend",
            f"scripted:{script}", "--mcp-dir", str(records)]
    guest = str(ROOT / "wasm-samples" / "c_multi_tool.wasm")
    enabled = subprocess.run([*base, "--mcp", "time", guest], capture_output=True,
                             text=True, timeout=120, check=False)
    assert '"timezone":"UTC"' in enabled.stdout, enabled.stderr
    # Without --mcp the task has not enabled MCP: the model's call is unknown.
    off = subprocess.run([*base, guest], capture_output=True, text=True, timeout=120,
                         check=False)
    assert "unknown_tool" in off.stdout, off.stderr
    bad = subprocess.run([*base, "--task-param", "mcp.enabeld=true", guest],
                         capture_output=True, text=True, timeout=120, check=False)
    assert bad.returncode == 2 and "mcp.enabeld" in bad.stderr


def test_the_config_file_gives_records_and_the_task_layer(tmp_path: Path) -> None:
    from spearpy.host import Host

    config = tmp_path / "spearpy.toml"
    config.write_text('[task]\n"mcp.enabled" = true\n"mcp.default_server_ids" = ["time"]\n'
                      '[[mcp.servers]]\nserver_id = "time"\ntransport = "stdio"\n'
                      'allowed_tools = ["*"]\nstdio = { command = "mcp-server-time" }\n')
    with Host(config_file=config, cache_dir=None, task_params={"mcp.tool_denylist": ["x"]}) \
            as host:
        assert host.task_policy is not None and host.task_policy.enabled
        assert host.task_policy.defaults == ("time",)
        assert host.tools.has_mcp
    config.write_text('[task]\n"mcp.enabeld" = true\n')
    with pytest.raises(ValueError, match=r"mcp\.enabeld"):
        Host(config_file=config, cache_dir=None)
