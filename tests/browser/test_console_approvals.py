"""The console's Approvals page (issue 32), in headless Chromium, against the service as
`make run` starts it with a tool whose every call needs an approval."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, expect

from chalicelib.quota.policy import POLICY_DIR
from tests.browser.test_console import paste_token
from tests.e2e.http import call
from tests.support import running_service

pytestmark = pytest.mark.browser
HOSTILE = '<img src=x onerror="window.pwned=1">'


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    policy = json.loads((POLICY_DIR / "default.json").read_text())
    rule = {"tools": ["delete_tag"], "category": "write", "approval": True}
    policy["rules"] = [rule, *policy["rules"]]
    path: Path = tmp_path_factory.mktemp("approvals") / "policy.json"
    path.write_text(json.dumps(policy))
    with running_service({"QUOTA_POLICY": str(path)}) as base:
        yield base


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
