"""`spearpy mcp list` and `spearpy mcp call`, through click's runner and once
as a real process, against the SDK-written toolbox server over stdio."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from spearpy.cli.mcp_cmd import mcp

TOOLBOX = str(Path(__file__).parent / "mcp_servers" / "toolbox.py")


def _toml(**fields: Any) -> str:
    return "\n".join(f"{key} = {json.dumps(value)}" for key, value in fields.items()) + "\n"


@pytest.fixture
def registry(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    # No user config file, no SPEARPY_MCP_DIRS: only what each test gives.
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.delenv("SPEARPY_CONFIG", raising=False)
    monkeypatch.delenv("SPEARPY_MCP_DIRS", raising=False)
    monkeypatch.delenv("MCP_CLI_TEST_TOKEN", raising=False)
    directory = tmp_path / "mcp.d"
    directory.mkdir()
    (directory / "tb.toml").write_text(
        _toml(server_id="tb", display_name="Toolbox", transport="stdio",
              allowed_tools=["echo", "fail"])
        + f"[stdio]\ncommand = {json.dumps(sys.executable)}\nargs = {json.dumps([TOOLBOX])}\n")
    (directory / "gitlab.toml").write_text(
        _toml(server_id="gitlab", transport="stdio", allowed_tools=["*"])
        + '[stdio]\ncommand = "npx"\nargs = ["-y", "gitlab-mcp"]\n'
        + 'env = { GITLAB_TOKEN = "${ENV:MCP_CLI_TEST_TOKEN}" }\n')
    (directory / "nothing.toml").write_text(
        _toml(server_id="nothing", transport="stdio") + '[stdio]\ncommand = "true"\n')
    return directory


def invoke(*args: str) -> Any:
    return CliRunner().invoke(mcp, list(args), catch_exceptions=False)


def test_list_shows_transport_status_and_why_a_server_is_disabled(registry: Path) -> None:
    result = invoke("list", "--mcp-dir", str(registry))
    assert result.exit_code == 0, result.output
    out = result.output
    assert "tb (Toolbox)  [stdio]" in out and "enabled, not started" in out
    assert "allowed echo, fail (--probe lists them)" in out
    assert ("disabled: environment variable MCP_CLI_TEST_TOKEN is not set "
            "(needed by stdio.env.GITLAB_TOKEN)") in out
    assert "none: allowed_tools is empty (default deny)" in out
    assert "runs:   npx -y gitlab-mcp" in out


def test_list_probe_json_starts_servers_and_lists_their_allowed_tools(registry: Path) -> None:
    result = invoke("list", "--mcp-dir", str(registry), "--probe", "--json")
    assert result.exit_code == 1  # `nothing` (command `true`) cannot start
    doc = json.loads(result.stdout)
    rows = {row["server_id"]: row for row in doc["servers"]}
    tb = rows["tb"]
    assert (tb["enabled"], tb["started"], tb["state"]) == (True, True, "ready")
    assert tb["tools"] == ["echo", "fail"] and tb["hidden_tools"] > 5
    assert rows["gitlab"]["enabled"] is False and rows["gitlab"]["started"] is False
    assert "MCP_CLI_TEST_TOKEN" in rows["gitlab"]["disabled_reason"]
    assert rows["nothing"]["state"] == "failed" and rows["nothing"]["last_error"]
    assert doc["errors"] == []


def test_bad_records_are_named_by_file_and_field_and_fail_the_listing(registry: Path) -> None:
    (registry / "bad.toml").write_text('server_id = "bad"\ntransport = "carrier-pigeon"\n')
    result = invoke("list", "--mcp-dir", str(registry), "--json")
    assert result.exit_code == 1
    (error,) = json.loads(result.stdout)["errors"]
    assert error["source"].endswith("bad.toml") and error["field"] == "transport"
    assert {row["server_id"] for row in json.loads(result.stdout)["servers"]} == {
        "tb", "gitlab", "nothing"}


def test_the_config_file_names_dirs_and_inline_servers(registry: Path, tmp_path: Path) -> None:
    config = tmp_path / "conf" / "spearpy.toml"
    config.parent.mkdir()
    config.write_text(f'[mcp]\ndirs = ["../{registry.name}"]\n\n[[mcp.servers]]\n'
                      + _toml(server_id="inline", transport="streamable_http",
                              allowed_tools=["*"])
                      + '[mcp.servers.http]\nurl = "http://127.0.0.1:9/mcp"\n')
    result = invoke("list", "--config", str(config), "--json")
    rows = {row["server_id"]: row for row in json.loads(result.stdout)["servers"]}
    assert set(rows) == {"tb", "gitlab", "nothing", "inline"}
    assert rows["inline"]["url"] == "http://127.0.0.1:9/mcp"


def test_a_bad_mcp_table_is_a_usage_error_naming_the_file(registry: Path,
                                                         tmp_path: Path) -> None:
    config = tmp_path / "spearpy.toml"
    config.write_text('[mcp]\ndri = ["mcp.d"]\n')
    result = CliRunner().invoke(mcp, ["list", "--config", str(config)])
    assert result.exit_code == 2
    assert "spearpy.toml" in result.output and "unknown keys in [mcp]: ['dri']" in result.output


def test_call_prints_the_result_and_fails_on_a_tool_error(registry: Path) -> None:
    ok = invoke("call", "tb", "echo", '{"text": "hello over mcp"}', "--mcp-dir", str(registry))
    assert (ok.exit_code, ok.stdout) == (0, "hello over mcp\n")
    failed = invoke("call", "tb", "fail", '{"message": "no luck"}', "--mcp-dir", str(registry))
    assert failed.exit_code == 1
    error = json.loads(failed.stdout)["error"]
    assert error["code"] == "mcp_tool_failed" and "no luck" in error["message"]
    assert "mcp_tool_failed" in failed.stderr


def test_call_refuses_what_the_record_does_not_allow(registry: Path) -> None:
    denied = invoke("call", "tb", "env", "--mcp-dir", str(registry))
    assert denied.exit_code == 1 and json.loads(denied.stdout)["error"]["code"] == "mcp_denied"
    unknown = invoke("call", "nope", "echo", "{}", "--mcp-dir", str(registry))
    assert json.loads(unknown.stdout)["error"]["code"] == "mcp_unknown_server"
    bad = CliRunner().invoke(mcp, ["call", "tb", "echo", "[1]", "--mcp-dir", str(registry)])
    assert bad.exit_code == 2 and "must be a JSON object" in bad.output


def test_the_group_runs_as_a_process_with_logs_off_stdout(registry: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-c", "from spearpy.cli.mcp_cmd import mcp; mcp()", "--log-level", "info",
         "list", "--mcp-dir", str(registry), "--probe", "--json"],
        capture_output=True, text=True, timeout=120)
    doc = json.loads(proc.stdout)  # stdout holds the document and nothing else
    assert proc.returncode == 1  # `nothing` failed to start
    tb = next(row for row in doc["servers"] if row["server_id"] == "tb")
    assert tb["tools"] == ["echo", "fail"]
    assert "mcp server ready" in proc.stderr
