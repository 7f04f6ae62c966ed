"""SPEAR's three-layer MCP rule over plain data: globs, task config, guest
set-params and their errnos, effective servers and tools, approvals."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from spearpy.mcp.policy import (
    EACCES,
    EINVAL,
    Approval,
    SessionPolicy,
    TaskPolicy,
    apply_session_param,
    approval_for,
    call_denial,
    check_session_param,
    effective_servers,
    effective_tools,
    session_from_params,
    tool_denial,
    wildcard_match,
)

TASK = TaskPolicy(enabled=True, default_server_ids=("fs",), allowed_server_ids=("fs", "git"),
                  tool_allowlist=("read_*", "list_*", "git_*"), tool_denylist=("read_secret",))
FS_TOOLS = ["read_file", "read_secret", "list_directory", "write_file", "search_files"]


@pytest.mark.parametrize(("pattern", "text", "expected"), [
    ("*", "anything", True), ("*", "", True), ("read_*", "read_file", True),
    ("read_*", "write_file", False), ("a?c", "abc", True), ("a?c", "ac", False),
    ("ab*cd", "abcd", True), ("ab*cd", "ab__cd", True), ("ab*cd", "ab__ce", False),
    ("", "", True), ("", "x", False), ("[ab]", "a", False), ("[ab]", "[ab]", True),
    ("*.*", "a.b", True), ("?", "é", True),
])
def test_wildcard_is_spears(pattern: str, text: str, expected: bool) -> None:
    assert wildcard_match(pattern, text) is expected


def test_wildcard_stays_fast_on_hostile_patterns() -> None:
    assert not wildcard_match("*a" * 200 + "b", "a" * 5000)  # a regex would backtrack for ages


def test_task_config_keys_and_spear_string_forms() -> None:
    task = TaskPolicy.from_params({
        "mcp.enabled": "true", "mcp.default_server_ids": '["gitlab","fs"]',
        "mcp.tool_allowlist": "read_*, list_*", "model": "ignored"})
    assert task.enabled and task.default_server_ids == ("gitlab", "fs")
    assert task.allowed == ("gitlab", "fs")  # upper bound defaults to the defaults
    assert task.tool_allowlist == ("read_*", "list_*")
    explicit = TaskPolicy.from_params({"mcp.enabled": True, "mcp.default_server_ids": ["b", "c"],
                                       "mcp.allowed_server_ids": ["a", "b"]})
    assert explicit.allowed == ("a", "b") and explicit.defaults == ("b",)
    assert not TaskPolicy.from_params({}).enabled


@pytest.mark.parametrize("params", [
    {"mcp.enabled": "maybe"}, {"mcp.default_server_ids": 3}, {"mcp.tool_denylist": [1]},
    {"mcp.server_ids": ["fs"]}, {"mcp.default_servers": ["fs"]}, {"mcp.allowed_server_ids": "[x"},
])
def test_bad_task_config_names_the_key(params: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="mcp"):
        TaskPolicy.from_params(params)


@pytest.mark.parametrize(("task", "key", "value", "rc"), [
    (TASK, "mcp.task_tool_allowlist", ["*"], EACCES),
    (TASK, "mcp.task_anything", None, EACCES),
    (TaskPolicy(), "mcp.enabled", True, EACCES),
    (TaskPolicy(), "mcp.enabled", False, 0),
    (TASK, "mcp.enabled", True, 0),
    (TASK, "mcp.enabled", "true", EINVAL),
    (TASK, "mcp.enabled", 1, EINVAL),
    (TASK, "mcp.server_ids", ["fs", "git"], 0),
    (TASK, "mcp.server_ids", ["fs", ""], 0),
    (TASK, "mcp.server_ids", ["fs", "web"], EACCES),
    (TaskPolicy(), "mcp.server_ids", ["fs"], EACCES),
    (TASK, "mcp.server_ids", "fs", EINVAL),
    (TASK, "mcp.server_ids", ["fs", 3], EINVAL),
    (TASK, "mcp.tool_allowlist", ["read_*"], 0),
    (TASK, "mcp.tool_allowlist", [], 0),
    (TASK, "mcp.tool_denylist", {"x": 1}, EINVAL),
    (TASK, "mcp.tool_denylist", ["x"] * 300, EINVAL),
    (TASK, "mcp.tool_allowlist", None, 0),
    (TASK, "mcp.server_id", ["fs"], EINVAL),
    (TASK, "mcp.bogus", True, EINVAL),
])
def test_session_param_errnos(task: TaskPolicy, key: str, value: Any, rc: int) -> None:
    assert check_session_param(task, key, value) == rc
    after_rc, after = apply_session_param(task, SessionPolicy(), key, value)
    assert after_rc == rc
    if rc:
        assert after == SessionPolicy()  # a refused set changes nothing


def test_worked_example_three_layers() -> None:
    registry = ["fs", "git", "web"]
    # No session params: the task defaults.
    assert effective_servers(registry, TASK, SessionPolicy()) == ("fs",)
    # The guest picks a server inside the upper bound, and narrows tools.
    session, refused = session_from_params(TASK, {
        "mcp.enabled": True, "mcp.server_ids": ["fs", "git"],
        "mcp.tool_allowlist": ["read_*", "list_*"], "mcp.tool_denylist": ["list_*"]})
    assert refused == {}
    assert effective_servers(registry, TASK, session) == ("fs", "git")
    assert effective_tools(FS_TOOLS, ["read_*", "list_*", "stat_*"], TASK, session) == ["read_file"]
    assert tool_denial("read_secret", ["read_*"], TASK, session) == "in the task's tool denylist"
    assert tool_denial("write_file", ["*"], TASK, session) == "not in the task's tool allowlist"
    assert tool_denial("list_directory", ["*"], TASK, session) == "in the session's tool denylist"
    # A session built around set-param still cannot reach past the task's bound.
    assert effective_servers(registry, TASK, SessionPolicy(server_ids=("web", "fs"))) == ("fs",)
    # A server the registry lacks (or disabled) simply drops out.
    assert effective_servers(["fs"], TASK, session) == ("fs",)
    # The guest switching MCP off leaves nothing; MCP is off unless the task enables it.
    assert effective_servers(registry, TASK, SessionPolicy(enabled=False, server_ids=("fs",))) == ()
    assert effective_servers(registry, TaskPolicy(), SessionPolicy()) == ()


def test_empty_allowed_tools_is_default_deny() -> None:
    assert effective_tools(FS_TOOLS, [], TaskPolicy(enabled=True), SessionPolicy()) == []
    assert effective_tools(FS_TOOLS, ["*"], TaskPolicy(enabled=True), SessionPolicy()) == FS_TOOLS


def test_call_denial_rechecks_at_call_time() -> None:
    session = SessionPolicy(server_ids=("fs",))
    assert call_denial("fs", "read_file", available=["fs", "git"], server_allowed=["*"],
                       task=TASK, session=session) is None
    assert "not enabled" in (call_denial("git", "git_log", available=["fs", "git"],
                                         server_allowed=["*"], task=TASK, session=session) or "")
    assert "allowed_tools" in (call_denial("fs", "read_file", available=["fs"],
                                           server_allowed=["list_*"], task=TASK,
                                           session=session) or "")


@pytest.mark.parametrize(("default", "per_tool", "tool", "host", "expected"), [
    ("", {}, "t", Approval.ALLOW, Approval.ALLOW),
    ("", {}, "t", Approval.ASK, Approval.ASK),
    ("never", {}, "t", Approval.ASK, Approval.ALLOW),
    ("always", {}, "t", Approval.ALLOW, Approval.ASK),
    ("policy", {}, "t", Approval.DENY, Approval.DENY),
    ("allow", {"delete_*": "deny", "delete_tmp": "never"}, "delete_all", Approval.ALLOW,
     Approval.DENY),
    ("allow", {"delete_*": "deny", "delete_tmp": "never"}, "delete_tmp", Approval.ALLOW,
     Approval.ALLOW),
    ("deny", {"read_*": "ask", "read_f*": "allow"}, "read_file", Approval.ALLOW, Approval.ALLOW),
    ("deny", {"read_*": "ask"}, "read_dir", Approval.ALLOW, Approval.ASK),
    ("deny", {"read_*": "ask"}, "write", Approval.ALLOW, Approval.DENY),
])
def test_approval(default: str, per_tool: dict[str, str], tool: str, host: Approval,
                  expected: Approval) -> None:
    assert approval_for(tool, default, per_tool, host_default=host) is expected


def test_unknown_approval_value() -> None:
    with pytest.raises(ValueError, match="unknown approval policy"):
        approval_for("t", "sometimes")


# -- a guest can only narrow ---------------------------------------------------

server_names = st.sampled_from(["fs", "git", "web", "db", ""])
globs = st.sampled_from(["*", "read_*", "list_?", "git_*", "x", "", "*e*"])
tool_names = st.sampled_from([*FS_TOOLS, "git_log", "list_a", "x", "exec"])
json_values = st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=5),
                        st.lists(st.one_of(server_names, globs, st.integers()), max_size=4))
keys = st.sampled_from(["mcp.enabled", "mcp.server_ids", "mcp.tool_allowlist",
                        "mcp.tool_denylist", "mcp.task_tool_allowlist", "mcp.other"])
tasks = st.builds(
    TaskPolicy, enabled=st.booleans(),
    default_server_ids=st.lists(server_names, max_size=3).map(tuple),
    allowed_server_ids=st.one_of(st.none(), st.lists(server_names, max_size=3).map(tuple)),
    tool_allowlist=st.lists(globs, max_size=2).map(tuple),
    tool_denylist=st.lists(globs, max_size=2).map(tuple))


@given(tasks, st.lists(server_names, max_size=4),
       st.lists(st.tuples(keys, json_values), max_size=8),
       st.lists(globs, max_size=3), st.lists(tool_names, max_size=8))
def test_a_guest_can_only_narrow(task: TaskPolicy, registry: list[str],
                                 sets: list[tuple[str, Any]], server_allowed: list[str],
                                 tools: list[str]) -> None:
    session = SessionPolicy()
    for key, value in sets:
        _, session = apply_session_param(task, session, key, value)
    servers = effective_servers(registry, task, session)
    assert set(servers) <= set(task.allowed) & set(registry)
    if not task.enabled:
        assert servers == ()
    task_only = set(effective_tools(tools, server_allowed, task, SessionPolicy()))
    assert set(effective_tools(tools, server_allowed, task, session)) <= task_only
    # A denylist match at any layer vetoes.
    for tool in tools:
        if any(wildcard_match(p, tool) for p in task.tool_denylist + session.tool_denylist):
            assert tool_denial(tool, server_allowed, task, session) is not None
