"""The service's run page marks tool calls that ran at once: a run whose
model asks for two MCP calls in one message shows both cards with the
`parallel x2` badge (a guest-only run's cards have none: test_serve_page
reads their one badge). Debian's headless
Chromium driven by Playwright, a real `spearpy serve` app, the SDK-written
toolbox MCP server over stdio."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from spearpy import HostConfig
from spearpy.mcp.naming import spear_tool_name
from spearpy.serve import BackgroundServer, ServeConfig, create_app
from tests.test_serve_api import modules_dir
from tests.test_serve_page import browser, page, pytestmark, start_from_form

__all__ = ["browser", "page", "pytestmark"]  # the page test's fixtures and browser check

TOOLBOX = str(Path(__file__).parent / "mcp_servers" / "toolbox.py")
SLEEP = spear_tool_name("tb", "sleep")
SCRIPT = {
    "rules": [{"when": {"tool_messages": 0},
               "reply": {"tool_calls": [{"name": SLEEP, "arguments": {"seconds": 0.2}},
                                        {"name": SLEEP, "arguments": {"seconds": 0.3}}]}}],
    "default": {"content": "both slept: {{last_tool}}"},
}


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    where = tmp_path_factory.mktemp("parallel-page")
    mcp_dir = where / "mcp.d"
    mcp_dir.mkdir()
    (mcp_dir / "tb.toml").write_text(
        'server_id = "tb"\ntransport = "stdio"\nallowed_tools = ["sleep"]\n\n[stdio]\n'
        f"command = {json.dumps(sys.executable)}\nargs = [{json.dumps(TOOLBOX)}]\n")
    script = where / "script.json"
    script.write_text(json.dumps(SCRIPT))
    host = HostConfig(backend=f"scripted:{script}", cache_dir=None, timeout=60,
                      mcp_dirs=[mcp_dir],
                      task_params={"mcp.enabled": True, "mcp.default_server_ids": ["tb"]})
    config = ServeConfig(modules_dir=modules_dir(where), state_dir=where / "state", host=host,
                         grace=0.5)
    with BackgroundServer(create_app(config), grace=0.5) as server:
        yield server.url


def test_calls_that_ran_at_once_are_marked_on_the_page(service: str, page: Any) -> None:
    page.goto(service + "/")
    start_from_form(page, "c_multi_tool.wasm")
    # c_multi_tool exits 3 here (its own tools never ran): ended is enough.
    page.wait_for_selector("#rs-outcome:has-text('exited')", timeout=60000)
    cards = page.locator(".tool-card")
    assert cards.count() == 2
    for i in range(2):
        card = cards.nth(i)
        assert card.locator(".tool-name").inner_text() == SLEEP
        assert card.locator(".badge.parallel").inner_text() == "parallel \u00d72"
        assert "ok" in card.locator(".tool-state").inner_text()
    assert page.inner_text("#final-answer") == "both slept: slept 0.3"
