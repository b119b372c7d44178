"""The console and the email's one-click links in headless Chromium (Debian's package,
driven by Playwright for Python), against the service started as `make run` starts it."""

from __future__ import annotations

import re
import urllib.request
from typing import Any

import pytest
from playwright.sync_api import Browser, Page, expect

from tests.browser.conftest import ARTIFACTS
from tests.e2e.http import ADMIN_TOKEN, call
from tests.e2e.inbox import Stack

LINK = re.compile(r"(http://127\.0\.0\.1:\d+/actions/\S+)")


def emails(stack: Stack) -> list[dict[str, Any]]:
    return stack.inbox()


def run_away(stack: Stack, session: str) -> None:
    """The incident: an agent loop runs its session's write budget out."""
    body = {
        "session_id": session,
        "tool": "delete_tag",
        "principal": "cleanup-agent",
        "server": "articles MCP",
    }
    statuses = [call(f"{stack.url}/v1/check", "POST", body).status for _ in range(17)]
    assert statuses == [200] * 15 + [429] * 2


def paste_token(page: Page) -> None:
    """Sign in with the static admin token (the identity provider's button is the
    default; the token form is one click away)."""
    page.get_by_text("Use a token instead").click()
    page.get_by_label("Admin token").fill(ADMIN_TOKEN)
    page.get_by_role("button", name="Sign in with the token").click()


def sign_in(page: Page, stack: Stack) -> None:
    page.goto(f"{stack.url}/console")
    paste_token(page)
    expect(page.get_by_role("heading", name="Overview: the last 24 hours")).to_be_visible()


def test_the_console_finds_the_blocked_session_and_raises_it(
    stack: Stack, browser: Browser
) -> None:
    run_away(stack, "tag-cleanup-7")
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    sign_in(page, stack)
    row = page.get_by_role("row").filter(has_text="tag-cleanup-7")
    expect(row).to_contain_text("blocked")
    expect(row).to_contain_text("cleanup-agent")
    page.screenshot(path=str(ARTIFACTS / "overview-1280.png"), full_page=True)

    row.get_by_role("link", name="tag-cleanup-7").click()
    counters = page.locator("table.counters")
    expect(counters.get_by_role("row").filter(has_text="write")).to_contain_text("15 / 15")
    expect(page.locator(".facts")).to_contain_text("articles MCP")
    page.get_by_label("Reason").fill("let the clean-up finish")
    page.get_by_role("button", name="Raise", exact=True).click()
    expect(page.get_by_role("status")).to_contain_text("Done: raise: 15 → 25")
    expect(counters.get_by_role("row").filter(has_text="write")).to_contain_text("15 / 25")
    expect(page.get_by_role("cell", name="session_raised")).to_be_visible()
    page.screenshot(path=str(ARTIFACTS / "session-1280.png"), full_page=True)

    answer = call(
        f"{stack.url}/v1/check", "POST", {"session_id": "tag-cleanup-7", "tool": "delete_tag"}
    )
    assert answer.status == 200

    # An API error is shown in plain words, never as raw JSON.
    page.get_by_label("Reason").fill("too low")
    page.get_by_label("Raise mode").select_option("limit")
    page.get_by_label("Amount").fill("3")
    page.get_by_role("button", name="Raise", exact=True).click()
    alert = page.get_by_role("alert")
    expect(alert).to_contain_text("That would contradict the current state")
    expect(alert).not_to_contain_text('"code"')
    expect(alert).to_contain_text("Lower to base")

    small = browser.new_context(viewport={"width": 390, "height": 844})
    phone = small.new_page()
    sign_in(phone, stack)
    expect(phone.get_by_role("link", name="tag-cleanup-7")).to_be_visible()
    width = phone.evaluate("document.documentElement.scrollWidth")
    assert width <= 390
    phone.screenshot(path=str(ARTIFACTS / "overview-390.png"), full_page=True)
    assert phone.evaluate("localStorage.length") == 0 and "dev-admin" not in phone.url
    small.close()
    context.close()


def test_an_email_link_confirms_acts_once_then_answers_410(stack: Stack, browser: Browser) -> None:
    run_away(stack, "tag-cleanup-8")
    [email] = [m for m in emails(stack) if "tag-cleanup-8" in m["Subject"]]
    assert "server:     articles MCP" in email["Message"]
    raise_link = LINK.findall(email["Message"])[0]

    page = browser.new_context(viewport={"width": 390, "height": 844}).new_page()
    confirm = page.goto(raise_link)
    assert confirm is not None and confirm.status == 200
    expect(page.get_by_role("heading", name="Confirm this action")).to_be_visible()
    page.screenshot(path=str(ARTIFACTS / "link-confirm.png"), full_page=True)
    blocked = call(
        f"{stack.url}/v1/check", "POST", {"session_id": "tag-cleanup-8", "tool": "delete_tag"}
    )
    assert blocked.status == 429  # the GET changed nothing

    page.get_by_role("button", name="Confirm").click()
    expect(page.get_by_role("heading", name="Done")).to_be_visible()
    expect(page.locator("main")).to_contain_text("from 15 to 30")
    page.screenshot(path=str(ARTIFACTS / "link-done.png"), full_page=True)
    allowed = call(
        f"{stack.url}/v1/check", "POST", {"session_id": "tag-cleanup-8", "tool": "delete_tag"}
    )
    assert allowed.status == 200

    again = page.goto(raise_link)
    assert again is not None and again.status == 410
    expect(page.get_by_role("heading", name="This link was already used")).to_be_visible()
    request = urllib.request.Request(raise_link, data=b"", method="POST")
    with pytest.raises(urllib.error.HTTPError) as used:
        urllib.request.urlopen(request, timeout=60)
    assert used.value.code == 410

    audit = call(f"{stack.url}/v1/audit?session_id=tag-cleanup-8", token=ADMIN_TOKEN).body
    [raised] = [e for e in audit["events"] if e["type"] == "session_raised"]
    assert raised["actor"] == "email-link" and raised["detail"]["link_id"]
