"""Issue 20 in headless Chromium: the Audit tab shows the tenant's whole trail by
default, with the server and principal of each event, and the email's link confirms
what it will do now. Screenshots at 1280 and 390 px go to tests/browser/artifacts."""

from __future__ import annotations

import re
from typing import Any

import pytest
from playwright.sync_api import Browser, Page, expect

from tests.browser.conftest import ARTIFACTS
from tests.browser.test_console import LINK, emails, sign_in
from tests.browser.test_console_polish import Watched
from tests.e2e.http import ADMIN_TOKEN, call
from tests.e2e.inbox import Stack

pytestmark = pytest.mark.browser

WIDTHS = ((1280, 900), (390, 844))


def run_away(stack: Stack, session: str, server: str, principal: str) -> None:
    body = {"session_id": session, "tool": "delete_tag", "principal": principal, "server": server}
    statuses = [call(f"{stack.url}/v1/check", "POST", body).status for _ in range(17)]
    assert statuses == [200] * 15 + [429] * 2


def admin(stack: Stack, path: str, body: dict[str, Any]) -> None:
    reply = call(f"{stack.url}{path}", "POST", body, token=ADMIN_TOKEN)
    assert reply.status == 200, reply


def watch(browser: Browser, width: int, height: int) -> tuple[Any, Watched]:
    context = browser.new_context(viewport={"width": width, "height": height})
    return context, Watched(context.new_page())


def test_the_audit_tab_shows_the_whole_tenant_by_default(stack: Stack, browser: Browser) -> None:
    run_away(stack, "audit-inventory", server="inventory", principal="audit-bot")
    run_away(stack, "audit-billing", server="billing", principal="audit-bot")
    admin(
        stack,
        "/v1/sessions/audit-inventory/raise",
        {"category": "write", "add": 5, "reason": "finish the clean-up"},
    )
    admin(stack, "/v1/sessions/audit-billing/suspend", {"reason": "looks wrong"})
    for width, height in WIDTHS:
        context, watched = watch(browser, width, height)
        page = watched.page
        try:
            sign_in(page, stack)
            page.get_by_role("link", name="Audit", exact=True).click()
            expect(
                page.get_by_role("heading", name="Audit: every event of the tenant")
            ).to_be_visible()
            trail = page.locator("table.audit")
            # Session events, admin actions and notifications of both servers, newest first.
            first = trail.locator("tbody tr").first
            expect(first).to_contain_text("session_suspended")
            expect(first).to_contain_text("audit-billing")
            expect(first).to_contain_text("billing")
            expect(trail).to_contain_text("session_raised")
            expect(trail).to_contain_text("quota_exceeded")
            expect(trail).to_contain_text("notification_sent")
            expect(trail).to_contain_text("inventory")
            expect(trail).to_contain_text("dev-admin (admin)")
            assert page.evaluate("document.documentElement.scrollWidth") <= width
            watched.assert_clean()
            page.screenshot(path=str(ARTIFACTS / f"audit-tenant-{width}.png"), full_page=True)

            # One server's events only, then one type.
            page.get_by_label("Server").fill("inventory")
            page.get_by_role("button", name="Filter").click()
            heading = "Audit: every event of the tenant (server inventory)"
            expect(page.get_by_role("heading", name=heading)).to_be_visible()
            expect(trail).not_to_contain_text("billing")
            expect(trail).to_contain_text("session_raised")
            page.get_by_label("Event type").select_option("quota_exceeded")
            page.get_by_role("button", name="Filter").click()
            expect(trail.locator("tbody tr")).to_have_count(1)
            expect(trail).to_contain_text("audit-inventory")
            watched.assert_clean()

            # A session's link opens its page, with its server named.
            trail.get_by_role("link", name="audit-inventory").first.click()
            expect(page.locator(".facts")).to_contain_text("inventory")
            expect(page.locator(".facts .state")).to_have_text("active")
            watched.assert_clean()
        finally:
            context.close()


def test_the_link_page_says_what_it_will_do_now(stack: Stack, browser: Browser) -> None:
    stack.inbox()  # start from an empty inbox
    run_away(stack, "audit-link", server="inventory", principal="link-bot")
    [email] = [m for m in emails(stack) if "audit-link" in m["Subject"]]
    raise_link = LINK.findall(email["Message"])[0]
    for width, height in WIDTHS:
        context, watched = watch(browser, width, height)
        page: Page = watched.page
        try:
            page.goto(raise_link)
            expect(page.locator("main")).to_contain_text("write 15 → 30")
            expect(page.locator("dl")).to_contain_text("15 of 15")
            watched.assert_clean()
            page.screenshot(path=str(ARTIFACTS / f"link-confirm-{width}.png"), full_page=True)
        finally:
            context.close()
    # Raised past the link's target in the console meanwhile: the link says who did it.
    admin(stack, "/v1/sessions/audit-link/raise", {"category": "write", "limit": 40, "reason": "r"})
    context, watched = watch(browser, 390, 844)
    try:
        watched.page.goto(raise_link)
        expect(watched.page.locator("h1")).to_have_text("Already done")
        expect(watched.page.locator("main")).to_contain_text(
            re.compile(r"Already done by dev-admin \(admin\) at .*raised to 40")
        )
        watched.page.screenshot(path=str(ARTIFACTS / "link-already-done-390.png"), full_page=True)
    finally:
        context.close()
