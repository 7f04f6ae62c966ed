"""SPEAR's MCP tool names: encoding, parsing back, the compatibility form, long ids."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from spearpy.mcp.naming import (
    NameTable,
    ToolNameError,
    alias_name,
    fits_openai,
    is_mcp_name,
    parse_compat_name,
    parse_spear_name,
    parse_tool_name,
    spear_tool_name,
)

names = st.text(min_size=1, max_size=40)


def test_spear_example_from_the_issue() -> None:
    assert spear_tool_name("fs", "read_file") == "mcp__ZnM__cmVhZF9maWxl"
    assert parse_spear_name("mcp__ZnM__cmVhZF9maWxl") == ("fs", "read_file")


@given(names, names)
def test_round_trip_for_any_ids(server_id: str, tool: str) -> None:
    name = spear_tool_name(server_id, tool)
    assert parse_tool_name(name) == (server_id, tool)
    assert set(name) <= set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-")


def test_server_id_whose_token_ends_with_underscore() -> None:
    # base64url("ab?") == "YWI_": the name has "___"; SPEAR's split at the
    # first "__" would route to the wrong pair.
    name = spear_tool_name("ab?", "tool")
    assert "___" in name
    assert parse_spear_name(name) == ("ab?", "tool")


@pytest.mark.parametrize("bad", [
    "mcp__", "mcp____", "mcp__ZnM", "mcp__ZnM__", "mcp____cmVhZF9maWxl",
    "mcp__Z__cmVhZF9maWxl",          # one base64 char cannot be a whole token
    "mcp__ZnM=__cmVhZF9maWxl",       # padding is not part of the name
    "mcp__ZnN__cmVhZF9maWxl",        # non-canonical trailing bits
    "mcp__%%%__cmVhZF9maWxl",
    "mcp__gA__cmVhZF9maWxl",         # decodes to 0x80: not UTF-8
])
def test_bad_spear_names_are_refused(bad: str) -> None:
    with pytest.raises(ToolNameError):
        parse_spear_name(bad)


def test_compat_form() -> None:
    assert parse_compat_name("mcp.fs.read_file") == ("fs", "read_file")
    assert parse_compat_name("mcp.fs.a.b") == ("fs", "a.b")  # SPEAR: first dot splits
    assert parse_compat_name("mcp.a.b.tool", ["a.b", "a"]) == ("a.b", "tool")
    for bad in ("mcp.fs", "mcp.fs.", "mcp..tool", "fs.read_file"):
        with pytest.raises(ToolNameError):
            parse_compat_name(bad)


def test_namespace_detection() -> None:
    assert is_mcp_name("mcp__ZnM__eA")
    assert is_mcp_name("mcp.fs.x")
    assert is_mcp_name(alias_name("fs", "x"))
    assert alias_name("s", "read file/é" * 20).startswith("mcp_h_")
    assert fits_openai(alias_name("s", "read file/é" * 20))
    assert not is_mcp_name("mcp_tool") and not is_mcp_name("read_file")
    with pytest.raises(ToolNameError):
        parse_tool_name("read_file")


def test_long_ids_get_a_short_alias_that_routes_back() -> None:
    table = NameTable()
    short = table.add("fs", "read_file")
    assert short == "mcp__ZnM__cmVhZF9maWxl"
    long_server, long_tool = "a-rather-long-server-identifier", "list_all_the_resources_please"
    spear = spear_tool_name(long_server, long_tool)
    assert len(spear) > 64 and not fits_openai(spear)
    alias = table.add(long_server, long_tool)
    assert alias != spear and fits_openai(alias)
    assert alias.startswith("mcp_h_") and alias.endswith("_list_all_the_resources_please")
    assert table.resolve(alias) == (long_server, long_tool)
    # Both SPEAR forms of an offered pair still route; pairs never offered do not.
    assert table.resolve(spear) == (long_server, long_tool)
    assert table.resolve("mcp.fs.read_file") == ("fs", "read_file")
    assert table.resolve(spear_tool_name("fs", "write_file")) is None
    assert table.resolve("mcp.other.read_file") is None
    assert table.add("fs", "read_file") == short and len(table) == 2


@given(st.lists(st.tuples(names, st.text(min_size=1, max_size=120)), max_size=8))
def test_every_offered_name_fits_openai_and_resolves(pairs: list[tuple[str, str]]) -> None:
    table = NameTable()
    for server_id, tool in pairs:
        name = table.add(server_id, tool)
        assert fits_openai(name)
        assert table.resolve(name) == (server_id, tool)
