"""One refused count in the console (issue 31): an agent whose MCP server held refusals
during a hold shows them in the session's refused count, explained, and each call shows
the legacy transport session it came over."""

from __future__ import annotations

from playwright.sync_api import Browser, expect

from tests.browser.test_console import sign_in
from tests.e2e.http import call
from tests.e2e.inbox import Stack

HELD = 22


def test_the_session_page_counts_held_refusals_and_says_what_they_are(
    stack: Stack, browser: Browser
) -> None:
    body = {"session_id": "held-loop-1", "tool": "delete_tag", "transport_session_id": "c-7"}
    statuses = [call(f"{stack.url}/v1/check", "POST", body).status for _ in range(16)]
    assert statuses == [200] * 15 + [429]
    refused = call(f"{stack.url}/v1/check", "POST", body)
    ticket = refused.body["hold_ticket"]
    report = {"write": {"count": HELD, "ticket": ticket}}
    assert call(f"{stack.url}/v1/check", "POST", {**body, "refused_locally": report}).status == 429

    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    sign_in(page, stack)
    page.goto(f"{stack.url}/console#/session/held-loop-1")
    counters = page.locator("table.counters").get_by_role("row").filter(has_text="write")
    # Three refused by the service (one answered from memory), 22 held: one count.
    expect(counters).to_contain_text("25, 22 of them answered by the MCP server without asking")
    last = page.get_by_role("row").filter(has_text="in a row")
    times = "\N{MULTIPLICATION SIGN}"
    expect(last).to_contain_text(f"refused {times}25 in a row, 22 of them answered by")
    expect(last).to_contain_text("c-7")
    context.close()
