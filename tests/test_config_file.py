"""The config file has one reader: spearpy/config_file.py parses the TOML,
refuses unknown keys naming the file, table and key, and each room reads its
own tables from the one parse."""

from __future__ import annotations

import ast
import os
from pathlib import Path

import pytest

from spearpy.backends.specs import backend_tables
from spearpy.config_file import EMPTY, read_config_file
from spearpy.errors import ConfigError, SpearpyError
from spearpy.host import Host
from spearpy.mcp.config_tables import mcp_tables

PACKAGE = Path(__file__).resolve().parent.parent / "spearpy"

FULL = """
default = "local"

[backends.local]
kind = "openai"
base_url = "http://127.0.0.1:9/v1"
api_key_env = ""

[models]
"m" = "local"

[[routes]]
name = "r"
to = ["local"]

[mcp]
dirs = ["mcp.d"]

[task]
"mcp.enabled" = false
"""


def _imports_tomllib(path: Path) -> bool:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import) and any(a.name == "tomllib" for a in node.names):
            return True
        if isinstance(node, ast.ImportFrom) and node.module == "tomllib":
            return True
    return False


def test_tomllib_is_imported_by_one_module() -> None:
    readers = sorted(str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*.py")
                     if _imports_tomllib(p))
    assert readers == ["config_file.py"]


def test_every_room_reads_its_tables_from_one_parse(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text(FULL)
    file = read_config_file(path)
    assert read_config_file(path) is file  # the Host, its catalog and the CLI share it
    backends = backend_tables(file)
    assert backends.default == "local" and set(backends.specs) == {"local"}
    assert [r.name for r in backends.routing.routes] == ["r"]
    dirs, servers = mcp_tables(file)
    assert dirs == [tmp_path / "mcp.d"] and servers == []
    assert file.table("task") == {"mcp.enabled": False}


def test_a_changed_file_is_read_again(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text(FULL)
    first = read_config_file(path)
    path.write_text(FULL.replace('"m" = "local"', '"m2" = "local"') + "\n")
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))
    second = read_config_file(path)
    assert second is not first and "m2" in second.table("models")


@pytest.mark.parametrize(("text", "problem"), [
    ("colour = 1\n", r"config file '.*config.toml': unknown top-level keys \['colour'\]"),
    ("[mcp]\ndri = 'x'\n", r"config file '.*config.toml': unknown keys in \[mcp\]: \['dri'\]"),
    ("task = 3\n", r"`task` must be a \[task\] table"),
    ("mcp = []\n", r"`mcp` must be a \[mcp\] table"),
    ("[backends.a]\nmodle = 'x'\n", r"\[backends.a\]: modle: Extra inputs are not permitted"),
    # `$` in a name pattern lets a trailing newline through; fullmatch does not.
    ('[backends."b\\n"]\n', r"backend name 'b\\n' must match"),
])
def test_unknown_or_misshapen_keys_fail_the_host_naming_file_table_and_key(
        tmp_path: Path, text: str, problem: str) -> None:
    path = tmp_path / "config.toml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=problem) as caught:
        Host(config_file=path, cache_dir=None)
    assert isinstance(caught.value, SpearpyError) and isinstance(caught.value, ValueError)


def test_no_file_at_the_default_location_is_the_empty_configuration(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    assert read_config_file(None) is EMPTY
    with pytest.raises(ConfigError, match="cannot read the config file"):
        read_config_file(tmp_path / "missing.toml")
