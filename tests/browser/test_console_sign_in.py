"""The console signs people in through `make run`'s local test issuer (authorization code
with PKCE, as with Cognito): an admin acts; a viewer sees no action and is refused one."""

from __future__ import annotations

import re

from playwright.sync_api import Browser, Page, expect

from tests.browser.test_console import run_away
from tests.e2e.inbox import Stack


def sign_in_as(page: Page, stack: Stack, person: str) -> None:
    page.goto(f"{stack.url}/console")
    page.get_by_role("button", name="Sign in with your identity provider").click()
    expect(page.get_by_role("heading", name="Local sign-in (make run only)")).to_be_visible()
    page.get_by_label("Person").select_option(person)
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("heading", name="Overview: the last 24 hours")).to_be_visible()
    expect(page.locator("#who")).to_have_text(f"{person}@demo.example · {person} · tenant demo")
    assert "code=" not in page.url  # the code leaves the address bar at once


def test_an_admin_signs_in_through_the_issuer_and_suspends(stack: Stack, browser: Browser) -> None:
    run_away(stack, "sign-in-admin-1")
    page = browser.new_context().new_page()
    sign_in_as(page, stack, "admin")

    page.goto(f"{stack.url}/console#/session/sign-in-admin-1")
    page.get_by_label("Reason").fill("signed in through the issuer")
    page.get_by_role("button", name="Suspend").click()
    expect(page.get_by_role("status")).to_contain_text("Done: suspend")
    expect(page.get_by_role("cell", name=re.compile("user:admin@demo.example"))).to_be_visible()


def test_a_viewer_sees_no_action_and_is_refused_one(stack: Stack, browser: Browser) -> None:
    run_away(stack, "sign-in-viewer-1")
    page = browser.new_context().new_page()
    sign_in_as(page, stack, "viewer")

    page.goto(f"{stack.url}/console#/session/sign-in-viewer-1")
    expect(page.locator("table.counters")).to_contain_text("15 / 15")
    expect(page.get_by_text("Your role (viewer) may only read")).to_be_visible()
    expect(page.get_by_role("button", name="Suspend")).to_have_count(0)

    status = page.evaluate(
        """async () => (await fetch("v1/sessions/sign-in-viewer-1/suspend", {method: "POST",
            headers: {Authorization: `Bearer ${sessionStorage.getItem("mcp-quota-admin-token")}`,
                      "Content-Type": "application/json"},
            body: JSON.stringify({reason: "x"})})).status"""
    )
    assert status == 403
