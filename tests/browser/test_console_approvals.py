"""Approvals (issue 32) in headless Chromium, against the service as `make run` starts it
with a tool whose every call needs an approval: the console's Approvals page, and the
approval email's one-click links (the email read from the SNS topic, as an approver
gets it)."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, expect

from chalicelib.quota.policy import POLICY_DIR
from tests.browser.conftest import ARTIFACTS
from tests.browser.test_console import paste_token
from tests.e2e.http import call
from tests.e2e.inbox import Stack, service_with_inbox

pytestmark = pytest.mark.browser
HOSTILE = '<img src=x onerror="window.pwned=1">'
APPROVE = re.compile(r"approve this call[^\n]*:\n\s+(http://127\.0\.0\.1:\d+/actions/\S+)")


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    policy = json.loads((POLICY_DIR / "default.json").read_text())
    rule = {"tools": ["delete_tag"], "category": "write", "approval": True}
    policy["rules"] = [rule, *policy["rules"]]
    path: Path = tmp_path_factory.mktemp("approvals") / "policy.json"
    path.write_text(json.dumps(policy))
    with service_with_inbox({"QUOTA_POLICY": str(path)}) as started:
        yield started


@pytest.fixture(scope="module")
def url(stack: Stack) -> str:
    return stack.url


def delete_tag(session: str, arguments: str) -> dict[str, Any]:
    """A check of a call that needs an approval, as the MCP side sends it."""
    return {
        "session_id": session,
        "tool": "delete_tag",
        "args_digest": hashlib.sha256(arguments.encode()).hexdigest(),
        "arguments_preview": arguments,
        "principal": "cleanup-agent",
        "server": "articles MCP",
    }


def test_an_operator_approves_a_call_on_the_approvals_page(url: str, browser: Browser) -> None:
    """The agent's arguments show as text (never markup), and the call runs once after
    the click. (Defect class: stored XSS through an approval's arguments.)"""
    body = {
        "session_id": "approve-1",
        "tool": "delete_tag",
        "args_digest": hashlib.sha256(b"{}").hexdigest(),
        "arguments_preview": HOSTILE,
    }
    asked = call(f"{url}/v1/check", "POST", body)
    assert asked.status == 403
    approval_id = asked.body["approval"]["id"]
    page = browser.new_context(viewport={"width": 1400, "height": 900}).new_page()
    page.goto(f"{url}/console")
    paste_token(page)
    expect(page.get_by_role("heading", name="By server and principal")).to_be_visible()
    page.get_by_role("link", name="Approvals").click()
    expect(page.get_by_role("heading", name="Approvals")).to_be_visible()
    row = page.get_by_role("row").filter(has_text=approval_id)
    expect(row).to_contain_text(HOSTILE)
    row.get_by_label(f"reason for {approval_id}").fill("ticket 42")
    row.get_by_role("button", name="Approve").click()
    expect(page.get_by_text("Approved: the call may run once.")).to_be_visible()
    assert page.evaluate("window.pwned") is None
    assert call(f"{url}/v1/check", "POST", body).status == 200
    assert call(f"{url}/v1/check", "POST", body).status == 403


def test_an_approver_approves_from_the_email_link(stack: Stack, browser: Browser) -> None:
    """The approve link of the email, opened in Chromium: the page changes nothing until
    its button is clicked; then the call runs exactly once, and the next one needs a new
    approval. (Defect class: a mail scanner's prefetch approving, or one click approving
    more than one call.)"""
    body = delete_tag("link-approve", '{"tag": "obsolete"}')
    asked = call(f"{stack.url}/v1/check", "POST", body)
    assert asked.status == 403 and asked.body["error"]["code"] == "approval_required"
    approval_id = asked.body["approval"]["id"]
    [email] = [m for m in stack.inbox() if approval_id in m["Message"]]
    assert 'Arguments:  {"tag": "obsolete"}' in email["Message"]
    [link] = APPROVE.findall(email["Message"])

    page = browser.new_context(viewport={"width": 390, "height": 844}).new_page()
    shown = page.goto(link)
    assert shown is not None and shown.status == 200
    expect(page.get_by_role("heading", name="Approve this call")).to_be_visible()
    expect(page.locator("main")).to_contain_text('{"tag": "obsolete"}')
    expect(page.locator("main")).to_contain_text("cleanup-agent")
    page.screenshot(path=str(ARTIFACTS / "approval-link-confirm.png"), full_page=True)
    still = call(f"{stack.url}/v1/check", "POST", body)
    assert still.body["approval"]["id"] == approval_id  # the GET decided nothing

    page.get_by_role("button", name="Approve").click()
    expect(page.get_by_role("heading", name="Approved")).to_be_visible()
    assert call(f"{stack.url}/v1/check", "POST", body).status == 200
    again = call(f"{stack.url}/v1/check", "POST", body)
    assert again.body["error"]["code"] == "approval_required"
    assert again.body["approval"]["id"] != approval_id

    used = page.goto(link)
    assert used is not None and used.status == 410
    expect(page.get_by_role("heading", name="This link was already used")).to_be_visible()


def test_an_operator_denies_a_call_on_the_approvals_page(url: str, browser: Browser) -> None:
    """A deny in the console: the next check of the call answers approval_denied."""
    body = delete_tag("console-deny", '{"tag": "keep-me"}')
    approval_id = call(f"{url}/v1/check", "POST", body).body["approval"]["id"]
    page = browser.new_context(viewport={"width": 1400, "height": 900}).new_page()
    page.goto(f"{url}/console#/approvals")
    paste_token(page)
    expect(page.get_by_role("heading", name="Approvals")).to_be_visible()
    row = page.get_by_role("row").filter(has_text=approval_id)
    row.get_by_label(f"reason for {approval_id}").fill("keep this tag")
    row.get_by_role("button", name="Deny").click()
    expect(page.get_by_text("Denied.")).to_be_visible()
    refused = call(f"{url}/v1/check", "POST", body)
    assert refused.status == 403 and refused.body["error"]["code"] == "approval_denied"
