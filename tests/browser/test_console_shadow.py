"""The console's "would have refused" page (issue 22), in headless Chromium, against the
service as `make run` starts it with writes in shadow mode."""

from __future__ import annotations

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


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    policy = json.loads((POLICY_DIR / "default.json").read_text())
    policy["categories"]["write"]["enforce"] = False
    path: Path = tmp_path_factory.mktemp("shadow") / "policy.json"
    path.write_text(json.dumps(policy))
    with running_service({"QUOTA_POLICY": str(path)}) as base:
        yield base


def test_the_console_shows_what_would_have_been_refused(url: str, browser: Browser) -> None:
    body = {"session_id": "shadow-1", "tool": "delete_tag", "server": "articles MCP"}
    assert [call(f"{url}/v1/check", "POST", body).status for _ in range(18)] == [200] * 18
    page = browser.new_context(viewport={"width": 1280, "height": 900}).new_page()
    page.goto(f"{url}/console")
    paste_token(page)
    # Signed in once the overview has drawn: a click before it would be overtaken by it.
    expect(page.get_by_role("heading", name="By server and principal")).to_be_visible()
    page.get_by_role("link", name="Would refuse").click()
    expect(page.get_by_role("heading", name="Would have refused (shadow mode)")).to_be_visible()
    row = page.get_by_role("row").filter(has_text="delete_tag")
    expect(row).to_contain_text("articles MCP")
    expect(row.get_by_role("cell").nth(3)).to_have_text("3")
