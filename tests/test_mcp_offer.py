"""The MCP tool source's offer across sends, against the real toolbox over
stdio: a warm send gets the tools, names and aliases made for the same
policies last time (one cache, the manager's, keeps them), and another
policy or a changed listing gets its own."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from spearpy.chat.protocol import CallBudget
from spearpy.mcp import McpManager, SessionPolicy, TaskPolicy
from spearpy.mcp.source import McpTools
from spearpy.observe.scrub import SecretScrubber
from tests.test_mcp_client import TOOLBOX, call, stdio

TASK = TaskPolicy(enabled=True, default_server_ids=("own",))


@pytest.fixture
def manager() -> Iterator[McpManager]:
    mgr = McpManager([stdio("own", [TOOLBOX], allowed_tools=["echo", "crash", "grow", "late"])])
    yield mgr
    mgr.close()


def _refs(source: McpTools, session: SessionPolicy) -> list[object]:
    return [tool.ref for tool in source.offer(TASK, session, deadline=None, cancel=None).tools]


def test_a_warm_send_gets_the_tools_made_for_its_policies(manager: McpManager) -> None:
    source = McpTools(manager, SecretScrubber())
    first = source.offer(TASK, SessionPolicy(), deadline=None, cancel=None)
    assert [tool.ref for tool in first.tools] == [("own", "echo"), ("own", "crash"),
                                                  ("own", "grow")]
    again = source.offer(TASK, SessionPolicy(), deadline=None, cancel=None)
    assert again.tools is first.tools and again.aliases is first.aliases
    assert again.failures == []
    assert _refs(source, SessionPolicy(tool_denylist=("crash",))) == [("own", "echo"),
                                                                      ("own", "grow")]
    assert source.offer(TASK, SessionPolicy(), deadline=None, cancel=None).tools is first.tools
    # grow adds `late` and says tools/list_changed: the next offer is made anew.
    assert call(manager, "own", "grow").content == "grown"
    deadline = time.monotonic() + 5  # a hang guard: the notification comes on its own
    while ("own", "late") not in _refs(source, SessionPolicy()):
        assert time.monotonic() < deadline, "the cached offer outlived tools/list_changed"
        time.sleep(0.05)
    grown = source.offer(TASK, SessionPolicy(), deadline=None, cancel=None)
    assert grown.tools is not first.tools and ("own", "late") in [t.ref for t in grown.tools]


def test_policies_built_with_lists_are_kept_as_tuples_and_cached(manager: McpManager) -> None:
    """An embedder's SessionPolicy(tool_denylist=[...]) or TaskPolicy with
    lists is the policy its tuples make: equal, hashable, the same offer."""
    listed = SessionPolicy(server_ids=["own"], tool_denylist=["crash"])  # type: ignore[arg-type]
    assert listed == SessionPolicy(server_ids=("own",), tool_denylist=("crash",))
    task = TaskPolicy(enabled=True, default_server_ids=["own"])  # type: ignore[arg-type]
    assert task == TASK and hash(task) == hash(TASK)
    source = McpTools(manager, SecretScrubber())
    first = source.offer(task, listed, deadline=None, cancel=None)
    assert [tool.ref for tool in first.tools] == [("own", "echo"), ("own", "grow")]
    assert source.offer(task, listed, deadline=None, cancel=None).tools is first.tools


def test_two_sources_on_one_manager_each_get_their_own_tools(manager: McpManager) -> None:
    """The manager's cached offer holds what a source made of it; another
    source on the same manager (its own scrubber) must not be handed the
    first one's tools, whose calls would pass the first one's scrubber."""
    plain = McpTools(manager, SecretScrubber())
    mine = McpTools(manager, SecretScrubber(["hunter2-0123456789"]))
    first = plain.offer(TASK, SessionPolicy(), deadline=None, cancel=None)
    assert all(tool.source is plain for tool in first.tools)
    offer = mine.offer(TASK, SessionPolicy(), deadline=None, cancel=None)
    echo = next(tool for tool in offer.tools if tool.ref == ("own", "echo"))
    assert echo.source is mine
    outcome = echo.source.call(echo.ref, '{"text": "key hunter2-0123456789"}',
                               CallBudget(max_output_bytes=4096))
    assert outcome.ok and "hunter2-0123456789" not in (outcome.output or "")
    # Each keeps reusing its own on a warm send.
    assert plain.offer(TASK, SessionPolicy(), deadline=None, cancel=None).tools is first.tools
    assert mine.offer(TASK, SessionPolicy(), deadline=None, cancel=None).tools is offer.tools
