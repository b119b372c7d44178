"""The console's details in headless Chromium: what the page shows is true and nothing else.

Every page is watched for console errors and failed requests (a missing asset or a
favicon 404 shows up there), and its text for a stray `null` or `undefined`.
"""

from __future__ import annotations

import re
import urllib.request
from collections.abc import Iterator

import pytest
from playwright.sync_api import Browser, Page, expect

from tests.browser.conftest import ARTIFACTS
from tests.browser.test_console import paste_token, sign_in
from tests.e2e.http import call
from tests.e2e.inbox import Stack

pytestmark = pytest.mark.browser

STRAY = re.compile(r"\b(null|undefined|NaN|\[object Object\])\b")


class Watched:
    """A page and every error its console printed or request that failed."""

    def __init__(self, page: Page) -> None:
        self.page = page
        self.errors: list[str] = []
        page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: self.errors.append(str(e)))
        page.on(
            "response",
            lambda r: self.errors.append(f"{r.status} {r.url}") if r.status >= 400 else None,
        )

    def text(self) -> str:
        return self.page.locator("body").inner_text()

    def assert_clean(self) -> None:
        assert not STRAY.search(self.text()), self.text()
        assert self.errors == []


@pytest.fixture
def watched(browser: Browser) -> Iterator[Watched]:
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    try:
        yield Watched(context.new_page())
    finally:
        context.close()


CLIENT = {"name": "claude-code", "version": "1.0.71"}


def run_away(
    stack: Stack,
    session: str,
    server: str = "inventory",
    principal: str = "ops-bot",
    client: dict[str, str] | None = CLIENT,
) -> None:
    body: dict[str, object] = {
        "session_id": session,
        "tool": "delete_tag",
        "principal": principal,
        "server": server,
    }
    if client is not None:
        body["client"] = client
    statuses = [call(f"{stack.url}/v1/check", "POST", body).status for _ in range(17)]
    assert statuses == [200] * 15 + [429] * 2


def test_the_nav_is_hidden_until_sign_in(stack: Stack, watched: Watched) -> None:
    watched.page.goto(f"{stack.url}/console")
    idp = watched.page.get_by_role("button", name="Sign in with your identity provider")
    expect(idp).to_be_visible()
    expect(watched.page.get_by_label("Admin token")).to_be_hidden()  # one click away
    expect(watched.page.locator("#nav")).to_be_hidden()
    watched.assert_clean()
    sign_in(watched.page, stack)
    expect(watched.page.locator("#nav")).to_be_visible()
    watched.assert_clean()


def test_a_blocked_session_shows_its_state_and_server_and_no_stray_text(
    stack: Stack, watched: Watched
) -> None:
    run_away(stack, "polish-blocked")
    sign_in(watched.page, stack)
    watched.page.get_by_role("link", name="polish-blocked").click()
    facts = watched.page.locator(".facts")
    expect(facts).to_contain_text("blocked")
    expect(facts.locator(".state")).to_have_text("blocked")
    expect(facts).to_contain_text("inventory")
    expect(facts).to_contain_text("Client")
    expect(facts).to_contain_text("claude-code 1.0.71")
    expect(watched.page.locator("table.counters")).to_contain_text("15 / 15")
    watched.assert_clean()
    watched.page.screenshot(path=str(ARTIFACTS / "polish-session-1280.png"), full_page=True)


def test_the_category_keeps_its_value_after_a_raise(stack: Stack, watched: Watched) -> None:
    run_away(stack, "polish-raise")
    sign_in(watched.page, stack)
    page = watched.page
    page.goto(f"{stack.url}/console#/session/polish-raise")
    category = page.get_by_label("Category")
    expect(category).to_have_value("write")
    page.get_by_label("Reason").fill("finish the clean-up")
    page.get_by_role("button", name="Raise", exact=True).click()
    expect(page.get_by_role("status")).to_contain_text("Done: raise: 15 → 25")
    expect(category).to_have_value("write")
    page.get_by_label("Reason").fill("a little more")
    page.get_by_role("button", name="Raise", exact=True).click()
    expect(page.get_by_role("status")).to_contain_text("Done: raise: 25 → 35")
    expect(category).to_have_value("write")
    watched.assert_clean()


def test_the_console_with_a_trailing_slash_loads_its_assets(stack: Stack, watched: Watched) -> None:
    watched.page.goto(f"{stack.url}/console/")
    paste_token(watched.page)
    expect(watched.page.get_by_role("heading", name="Overview: the last 24 hours")).to_be_visible()
    watched.assert_clean()


def test_head_console_and_the_favicon_answer(stack: Stack) -> None:
    for path in ("/console", "/console/console.js"):
        request = urllib.request.Request(f"{stack.url}{path}", method="HEAD")
        with urllib.request.urlopen(request, timeout=60) as response:
            assert response.status == 200 and response.read() == b""
    with urllib.request.urlopen(f"{stack.url}/favicon.ico", timeout=60) as response:
        assert response.status in (200, 204)


def test_a_session_named_dot_dot_is_refused_at_the_check(stack: Stack) -> None:
    # A browser folds '..' (and '%2e%2e') out of a URL path (WHATWG URL), so a session by
    # that name could never be opened: the check refuses the name, with a 400 naming it.
    for name in ("..", "."):
        body = {"session_id": name, "tool": "delete_tag", "server": "dots"}
        reply = call(f"{stack.url}/v1/check", "POST", body)
        assert reply.status == 400, reply
        assert reply.body["error"]["field"] == "session_id"


def test_the_pages_fit_a_phone_and_a_desktop(stack: Stack, browser: Browser) -> None:
    run_away(stack, "polish-screens", principal="screens-bot")  # ops-bot's 100 a day
    for width, height in ((1280, 900), (390, 844)):
        context = browser.new_context(viewport={"width": width, "height": height})
        try:
            page = Watched(context.new_page())
            page.page.goto(f"{stack.url}/console")
            page.page.screenshot(path=str(ARTIFACTS / f"polish-signin-{width}.png"))
            sign_in(page.page, stack)
            page.page.screenshot(
                path=str(ARTIFACTS / f"polish-overview-{width}.png"), full_page=True
            )
            page.page.goto(f"{stack.url}/console#/session/polish-screens")
            expect(page.page.locator(".facts .state")).to_have_text("blocked")
            assert page.page.evaluate("document.documentElement.scrollWidth") <= width
            page.page.screenshot(
                path=str(ARTIFACTS / f"polish-session-{width}.png"), full_page=True
            )
            page.page.goto(f"{stack.url}/console#/audit")
            expect(page.page.get_by_role("heading", name=re.compile("^Audit"))).to_be_visible()
            page.page.screenshot(path=str(ARTIFACTS / f"polish-audit-{width}.png"), full_page=True)
            page.assert_clean()
        finally:
            context.close()


def test_the_overview_groups_sessions_by_server_and_principal(
    stack: Stack, watched: Watched
) -> None:
    run_away(stack, "polish-group-a", server="invoicing")
    run_away(stack, "polish-group-b", server="invoicing")
    sign_in(watched.page, stack)
    group = watched.page.locator(
        "section", has=watched.page.get_by_role("heading", name="By server and principal")
    )
    row = group.get_by_role("row").filter(has_text="invoicing")
    expect(row).to_contain_text("ops-bot")
    expect(row.get_by_role("cell").last).to_have_text("2")
    watched.assert_clean()


def test_the_overview_names_each_sessions_server_and_client(stack: Stack, watched: Watched) -> None:
    named = {**CLIENT, "oauth_client_id": "agent-app"}
    run_away(stack, "polish-client", server="billing", principal="client-bot", client=named)
    run_away(stack, "polish-no-client", server="billing", principal="client-bot", client=None)
    sign_in(watched.page, stack)
    rows = watched.page.get_by_role("row")
    named_row = rows.filter(has=watched.page.get_by_role("link", name="polish-client", exact=True))
    expect(named_row.locator('td[data-label="Server"]')).to_have_text("billing")
    # Name and version only: the OAuth client id is on the session's own page.
    expect(named_row.locator('td[data-label="Client"]')).to_have_text("claude-code 1.0.71")
    blank = rows.filter(has=watched.page.get_by_role("link", name="polish-no-client"))
    expect(blank.locator('td[data-label="Client"]')).to_have_text("-")
    watched.assert_clean()


def test_a_raise_that_would_lower_names_the_button(stack: Stack, watched: Watched) -> None:
    run_away(stack, "polish-lower", principal="lower-bot")  # ops-bot's 100 a day
    sign_in(watched.page, stack)
    page = watched.page
    page.goto(f"{stack.url}/console#/session/polish-lower")
    page.get_by_label("Reason").fill("too low")
    page.get_by_label("Raise mode").select_option("limit")
    page.get_by_label("Amount").fill("3")
    page.get_by_role("button", name="Raise", exact=True).click()
    expect(page.get_by_role("alert")).to_contain_text("use the “Lower to base” button")
    # The refused raise itself: its 409 response and Chromium's console line about it.
    watched.errors = [e for e in watched.errors if "409" not in e]
    watched.assert_clean()
