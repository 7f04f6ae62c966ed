"""The MCP registry: SPEAR's mcp.d TOML records, bad records, env references,
several directories, records from Python."""

from __future__ import annotations

from pathlib import Path

import pytest

from spearpy.mcp.records import ServerRecord
from spearpy.mcp.registry import load_registry, resolve

# SPEAR's own config/sms/mcp.d/fs.toml and gitlab.toml, unchanged.
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
SPEAR_GITLAB = """\
server_id = "gitlab"
display_name = "GitLab"
transport = "stdio"
tool_namespace = ""
allowed_tools = ["*"]

[stdio]
command = "npx"
args = ["-y", "@modelcontextprotocol/server-gitlab"]
env = { GITLAB_PERSONAL_ACCESS_TOKEN = "${ENV:GITLAB_PERSONAL_ACCESS_TOKEN}", \
GITLAB_API_URL = "${ENV:GITLAB_API_URL:-https://gitlab.com/api/v4}" }
cwd = ""

[budgets]
tool_timeout_ms = 15000
max_concurrency = 2
"""


def write(directory: Path, name: str, text: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_text(text)
    return path


def test_spear_mcp_d_loads_unchanged(tmp_path: Path) -> None:
    write(tmp_path, "fs.toml", SPEAR_FS)
    write(tmp_path, "gitlab.toml", SPEAR_GITLAB)
    registry = load_registry([tmp_path], environ={"GITLAB_PERSONAL_ACCESS_TOKEN": "glpat-x"})
    assert registry.errors == []
    fs = registry.entries["fs"]
    rec = fs.record
    assert (rec.display_name, rec.transport, rec.allowed_tools) == (
        "Filesystem", "stdio", ["read_*", "list_*", "stat_*", "search_*"])
    assert rec.stdio is not None and rec.stdio.command == "npx" and rec.stdio.cwd is None
    assert rec.stdio.args == ["-y", "@modelcontextprotocol/server-filesystem", "./"]
    assert rec.budgets.tool_timeout_ms == 8000
    assert rec.budgets.max_tool_output_bytes == 64 * 1024
    assert fs.enabled and fs.source == str(tmp_path / "fs.toml")
    gitlab = registry.entries["gitlab"]
    assert gitlab.env == {"GITLAB_PERSONAL_ACCESS_TOKEN": "glpat-x",
                          "GITLAB_API_URL": "https://gitlab.com/api/v4"}
    assert gitlab.record.budgets.max_concurrency == 2
    assert "glpat-x" not in repr(gitlab)  # resolved secrets stay out of reprs
    assert registry.enabled_ids() == ("fs", "gitlab")


def test_missing_env_var_disables_only_that_server(tmp_path: Path) -> None:
    write(tmp_path, "fs.toml", SPEAR_FS)
    write(tmp_path, "gitlab.toml", SPEAR_GITLAB)
    registry = load_registry([tmp_path], environ={})
    gitlab = registry.entries["gitlab"]
    assert not gitlab.enabled
    assert gitlab.disabled_reason == ("environment variable GITLAB_PERSONAL_ACCESS_TOKEN is not "
                                      "set (needed by stdio.env.GITLAB_PERSONAL_ACCESS_TOKEN)")
    assert registry.errors == [] and registry.enabled_ids() == ("fs",)


def test_budget_defaults_and_clamps() -> None:
    notes: list[str] = []
    base = {"server_id": "s", "transport": "stdio", "stdio": {"command": "x"}}
    # A [budgets] table without tool_timeout_ms means the default, not 100 ms.
    rec = ServerRecord.parse({**base, "budgets": {"max_concurrency": 2}}, notes)
    assert rec.budgets.tool_timeout_ms == 8000
    assert rec.budgets.effective_list_timeout_ms == 12000
    rec = ServerRecord.parse({**base, "budgets": {
        "tool_timeout_ms": 5, "max_tool_output_bytes": 1 << 30, "max_concurrency": 0,
        "list_timeout_ms": 999_999}}, notes)
    assert rec.budgets.tool_timeout_ms == 100
    assert rec.budgets.max_tool_output_bytes == 10 * 1024 * 1024
    assert rec.budgets.max_concurrency == 8
    assert rec.budgets.effective_list_timeout_ms == 180_000
    assert any("tool_timeout_ms = 5 clamped to 100" in n for n in notes)
    rec = ServerRecord.parse({**base, "budgets": {"tool_timeout_ms": 30000}})
    assert rec.budgets.tool_timeout_ms == 30000
    assert rec.budgets.effective_list_timeout_ms == 30000  # never shorter than a call


def test_bad_records_name_file_and_field_and_the_rest_loads(tmp_path: Path) -> None:
    write(tmp_path, "a_good.toml", SPEAR_FS)
    write(tmp_path, "b_broken.toml", "server_id = 'x'\ntransport = [")
    write(tmp_path, "c_types.toml", SPEAR_FS.replace('"fs"', '"fs2"').replace(
        "tool_timeout_ms = 8000", 'tool_timeout_ms = "soon"'))
    write(tmp_path, "d_transport.toml", 'server_id = "w"\ntransport = "sse"\n')
    write(tmp_path, "e_nostdio.toml", 'server_id = "n"\ntransport = "stdio"\n')
    write(tmp_path, "f_url.json", '{"server_id": "u", "transport": "streamable_http", '
                                  '"http": {"url": "ftp://x"}}')
    write(tmp_path, "g_approval.toml", SPEAR_FS.replace('"fs"', '"fs3"') +
          '\n[approval_policy]\ndefault_policy = "sometimes"\n')
    write(tmp_path, ".hidden.toml", "garbage")
    write(tmp_path, "notes.txt", "garbage")
    registry = load_registry([tmp_path], environ={})
    assert list(registry.entries) == ["fs"]
    by_file = {Path(e.source).name: e for e in registry.errors}
    assert set(by_file) == {"b_broken.toml", "c_types.toml", "d_transport.toml",
                            "e_nostdio.toml", "f_url.json", "g_approval.toml"}
    assert "invalid TOML" in by_file["b_broken.toml"].message
    assert by_file["c_types.toml"].field == "budgets.tool_timeout_ms"
    assert by_file["d_transport.toml"].field == "transport"
    assert "[stdio]" in by_file["e_nostdio.toml"].message
    assert by_file["f_url.json"].field == "http.url"
    assert by_file["g_approval.toml"].field == "approval_policy.default_policy"
    assert str(by_file["c_types.toml"]).startswith(str(tmp_path / "c_types.toml")
                                                    + ": budgets.tool_timeout_ms: ")


def test_later_directories_override_with_a_note(tmp_path: Path) -> None:
    first = write(tmp_path / "one", "fs.toml", SPEAR_FS)
    second = write(tmp_path / "two", "files.toml", SPEAR_FS.replace(
        'display_name = "Filesystem"', 'display_name = "Local files"'))
    registry = load_registry([first.parent, second.parent, tmp_path / "missing"], environ={})
    assert registry.entries["fs"].record.display_name == "Local files"
    assert registry.entries["fs"].source == str(second)
    assert any("overrides" in n and str(first) in n for n in registry.notes)
    assert [str(e) for e in registry.errors] == [f"{tmp_path / 'missing'}: not a directory"]


def test_records_from_python_objects_and_mappings(tmp_path: Path) -> None:
    path = write(tmp_path, "fs.toml", SPEAR_FS)
    record = ServerRecord(server_id="time", transport="stdio", allowed_tools=["*"],
                          stdio={"command": "mcp-server-time"})  # type: ignore[arg-type]
    registry = load_registry([], [
        path, record,
        {"server_id": "web", "transport": "streamable_http", "allowed_tools": ["get_*"],
         "http": {"url": "https://${HOST}/mcp", "headers": {"Authorization": "Bearer ${TOKEN}"}}},
        {"server_id": "bad", "transport": "stdio"},
    ], environ={"HOST": "example.test", "TOKEN": "t0k"})
    assert set(registry.entries) == {"fs", "time", "web"}
    web = registry.entries["web"]
    assert web.url == "https://example.test/mcp"
    assert web.headers == {"Authorization": "Bearer t0k"}
    assert [e.source for e in registry.errors] == ["python record 'bad'"]


def test_env_from_unknown_fields_and_empty_allowed_tools() -> None:
    notes: list[str] = []
    rec = ServerRecord.parse({"server_id": "s", "transport": "stdio", "future_knob": 1,
                              "stdio": {"command": "x", "env_from": ["API_TOKEN"], "extra": 2},
                              "http": {"url": "http://ignored"}}, notes)
    assert rec.stdio is not None and rec.stdio.env == {"API_TOKEN": "${ENV:API_TOKEN}"}
    assert "unknown field 'future_knob' ignored" in notes
    assert "unknown field 'stdio.extra' ignored" in notes
    assert any("exposes no tool" in n for n in notes)
    assert any("[http] is ignored" in n for n in notes)
    entry = resolve(rec, environ={"API_TOKEN": "abc"})
    assert entry.env == {"API_TOKEN": "abc"}
    assert entry.process_env({"PATH": "/bin", "HOME": "/h", "LANG": "C", "OPENAI_API_KEY": "sk",
                              "USER": "me"}) == {"PATH": "/bin", "HOME": "/h", "LANG": "C",
                                                 "API_TOKEN": "abc"}


@pytest.mark.parametrize(("value", "environ", "expected"), [
    ("${A}", {"A": "1"}, "1"), ("${ENV:A}", {"A": "1"}, "1"),
    ("${ENV:A:-d}", {}, "d"), ("${A:-d}", {"A": ""}, "d"), ("${A}", {"A": ""}, ""),
    ("x-${A}-${B:-b}", {"A": "a"}, "x-a-b"), ("$A {A} ${", {}, "$A {A} ${"),
])
def test_env_reference_forms(value: str, environ: dict[str, str], expected: str) -> None:
    rec = ServerRecord(server_id="s", transport="stdio",
                       stdio={"command": "x", "env": {"V": value}})  # type: ignore[arg-type]
    assert resolve(rec, environ=environ).env == {"V": expected}
