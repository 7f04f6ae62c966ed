"""The service's web page in a real browser: Debian's headless Chromium driven
by Playwright. A run started from the form shows its tool calls live, then
its final answer and exit code; the cancel button stops a spinning guest; a
token given as ?token= opens a protected service; a journaled run lists its
steps, and "replay to here" and "fork from here" open new runs that finish."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from spearpy import HostConfig
from spearpy.serve import BackgroundServer, ServeConfig, create_app
from tests.test_serve_api import modules_dir, slow_script

CHROMIUM = "/usr/bin/chromium"
pytestmark = pytest.mark.skipif(not os.path.exists(CHROMIUM),
                                reason=f"no browser: {CHROMIUM} is not installed "
                                       "(apt-get install chromium)")
ARGS = ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]
TOKEN = "page-test-token-0a1b2c3d4e"
SCREENSHOT_COPY = Path("/tmp/serve-screenshot.png")


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    where = tmp_path_factory.mktemp("serve-page")
    mods = modules_dir(where)
    # Each completion answered after 400 ms: the run lasts long enough to be
    # seen while it runs.
    host = HostConfig(backend=f"scripted:{slow_script(where, 400)}", cache_dir=None,
                      timeout=60)
    # Journaled, so a run's view lists its steps to replay and fork from.
    open_config = ServeConfig(modules_dir=mods, state_dir=where / "open", host=host, grace=0.5,
                              journal=True, allow_models=("alt-model",))
    locked_config = ServeConfig(modules_dir=mods, state_dir=where / "locked", host=host,
                                token=TOKEN, grace=0.5)
    with BackgroundServer(create_app(open_config), grace=0.5) as open_server, \
            BackgroundServer(create_app(locked_config), grace=0.5) as locked_server:
        yield {"open": open_server.url, "locked": locked_server.url}


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    yield page
    context.close()
    assert errors == []  # no script error on the page


def start_from_form(page: Any, module: str) -> None:
    page.wait_for_selector(f"#f-module option[value='{module}']", state="attached")
    page.select_option("#f-module", module)
    page.click("#f-submit")
    page.wait_for_selector("#run-view:not([hidden])")


def test_a_run_started_from_the_form_shows_live_then_its_answer(
        service: dict[str, str], page: Any, tmp_path: Path) -> None:
    page.goto(service["open"] + "/")
    start_from_form(page, "c_multi_tool.wasm")
    # While it runs: the first tool card, the status still running.
    first_card = page.wait_for_selector(".tool-card", timeout=20000)
    assert page.inner_text("#rv-status") == "running"
    assert "add" in first_card.inner_text() and page.locator(".bubble.assistant").count() >= 1
    page.wait_for_selector("#exit-code:has-text('0')", timeout=30000)
    cards = page.locator(".tool-card")
    assert cards.count() == 4
    assert [cards.nth(i).locator(".tool-name").inner_text() for i in range(4)] == \
        ["add", "mul", "add", "upper"]
    for i in range(4):
        card = cards.nth(i)
        assert card.locator(".badge").inner_text() == "guest"
        assert "iteration" in card.inner_text() and "ok" in card.locator(".tool-state").inner_text()
    assert '{"product":20}' in cards.nth(1).inner_text()
    assert page.inner_text("#final-answer") == '(2 + 3) * 4 = 20, and {"text":"DONE"}'
    assert page.inner_text("#rs-outcome") == "exited"
    assert page.inner_text("#st-tokens") == "115"
    assert page.inner_text("#st-tools").startswith("4")
    assert "Compute (2 + 3) * 4" in page.inner_text(".bubble.user")
    assert "exited 0" in page.inner_text("#run-list")
    assert "on threads" in page.inner_text("#rv-id")  # where it ran
    shot = tmp_path / "serve-page.png"
    page.screenshot(path=str(shot), full_page=True)
    shutil.copy(shot, SCREENSHOT_COPY)  # where a person can look at it after the run


def test_the_cancel_button_stops_a_spinning_guest(service: dict[str, str], page: Any) -> None:
    page.goto(service["open"] + "/")
    start_from_form(page, "c_infinite_loop.wasm")
    page.wait_for_selector("#rv-cancel:not([hidden])")
    page.click("#rv-cancel")
    page.wait_for_selector("#exit-code:has-text('130')", timeout=20000)
    assert page.inner_text("#rs-outcome") == "cancelled"
    assert "DELETE" in page.inner_text("#rs-message")
    assert page.locator("#rv-cancel").is_hidden()


def test_a_token_in_the_address_opens_a_protected_service(service: dict[str, str],
                                                         page: Any) -> None:
    page.goto(service["locked"] + "/")
    page.wait_for_selector("#token-form:not([hidden])")  # the page asks for one
    page.goto(service["locked"] + "/?token=" + TOKEN)
    assert TOKEN not in page.url  # taken out of the address bar and history
    start_from_form(page, "c_hello.wasm")
    page.wait_for_selector("#exit-code:has-text('0')", timeout=20000)
    assert "hello from C: ok" in page.inner_text("#rs-stdout")
    assert TOKEN not in page.content()


def _run_id(page: Any) -> str:
    return str(page.evaluate("location.hash")).removeprefix("#/runs/")


def test_a_runs_steps_replay_and_fork_open_new_runs(service: dict[str, str],
                                                    page: Any) -> None:
    page.goto(service["open"] + "/")
    start_from_form(page, "c_multi_tool.wasm")
    page.wait_for_selector("#exit-code:has-text('0')", timeout=30000)
    original = _run_id(page)
    steps = page.locator("#journal-steps li")
    page.wait_for_selector("#journal-steps li .step-kind:text-is('end')", timeout=20000)
    kinds = [steps.nth(i).locator(".step-kind").inner_text() for i in range(steps.count())]
    assert kinds[0] == "start" and kinds[-1] == "end" and kinds.count("chat.completion") == 4
    assert steps.last.locator(".fork-step").count() == 0  # nothing to go live on after the end

    # Replay the whole run: a new run opens, says where it came from, and finishes the same.
    steps.last.locator(".replay-step").click()
    page.wait_for_function(f"location.hash.startsWith('#/runs/') && "
                           f"!location.hash.endsWith('{original}')")
    replay = _run_id(page)
    page.wait_for_selector("#exit-code:has-text('0')", timeout=30000)
    assert "(2 + 3) * 4 = 20" in page.inner_text("#rs-stdout")
    assert page.inner_text("#rv-origin") == f"replay of run {original}"
    assert page.locator("#journal").is_hidden()  # a replay writes no journal

    # Fork the original from its second completion with the allowed model.
    page.click(f"#rv-origin a[href='#/runs/{original}']")
    page.wait_for_selector("#journal-steps li .step-kind:text-is('end')", timeout=20000)
    second = page.locator("#journal-steps li", has=page.locator(
        ".step-kind:text-is('chat.completion')")).nth(1)
    at = second.get_attribute("data-seq")
    second.locator(".fork-step").click()
    page.wait_for_selector("#fork-form:not([hidden])")
    page.select_option("#fork-model", "alt-model")
    page.click("#fork-submit")
    page.wait_for_function(f"location.hash.startsWith('#/runs/') && "
                           f"!location.hash.endsWith('{original}')")
    assert _run_id(page) not in (original, replay)
    page.wait_for_selector("#exit-code:has-text('0')", timeout=30000)
    assert page.inner_text("#rv-origin") == f"fork of run {original} from step {at}"
    assert "(2 + 3) * 4 = 20" in page.inner_text("#rs-stdout")
    page.wait_for_selector("#journal-steps li .step-kind:text-is('end')", timeout=20000)
