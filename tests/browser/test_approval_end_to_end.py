"""Issue 32's last done-when: through the MCP Inspector CLI and a FastMCP client, a call
that needs a person's approval gets through it end to end, with Chromium clicking the
approve link of the approval email as the approver would.

Real parts: the service as `make run` starts it (its SNS topic read by an SQS inbox),
with a policy whose `delete_tag` and `wire_money` need an approval of each call;
`mcp-quota-proxy` in front of the TypeScript tags server (official TypeScript SDK) over
stdio, called by the Inspector CLI, one process per call; a FastMCP server with
`QuotaMiddleware`, called by a FastMCP client that declares URL-mode elicitation; Debian's
Chromium. How often a tool ran is its own record: the tags server's file of deletions,
the FastMCP tool's own count. A re-send of the approved call under its call id gets what
the run did (exactly-once writes), not a new approval.
"""

from __future__ import annotations

import asyncio
import json
import queue
import re
import shlex
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import mcp_types as mt
import pytest
from fastmcp import Client, FastMCP
from mcp_quota_client import META_CALL_ID_KEY, META_SESSION_KEY, QuotaClient, QuotaClientConfig
from mcp_quota_client.fastmcp import QuotaMiddleware
from mcp_quota_client.results import REPLAYED_META
from playwright.sync_api import Browser, expect

from chalicelib.quota.policy import POLICY_DIR
from tests.e2e.http import ADMIN_TOKEN, SERVER_TOKEN, call
from tests.e2e.inbox import Stack, service_with_inbox
from tests.support import ROOT

if str(ROOT / "examples") not in sys.path:  # proxy_support starts processes with launch
    sys.path.insert(0, str(ROOT / "examples"))

from launch import Running, wait_healthy

from tests.mcp.proxy_support import deletions, inspector, spawn_proxy, tags_command

pytestmark = pytest.mark.browser
APPROVE = re.compile(r"approve this call[^\n]*:\n\s+(http://127\.0\.0\.1:\d+/actions/\S+)")
EMAIL_WITHIN = 30.0  # seconds: the email goes through the notification queue
HEALTHY_WITHIN = 120.0  # seconds: generous, the suite shares two cores


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """The service with its admin inbox; two tools need an approval of each call."""
    policy = json.loads((POLICY_DIR / "default.json").read_text())
    rule = {"tools": ["delete_tag", "wire_money"], "category": "write", "approval": True}
    policy["rules"] = [rule, *policy["rules"]]
    path: Path = tmp_path_factory.mktemp("approval-e2e") / "policy.json"
    path.write_text(json.dumps(policy))
    with service_with_inbox({"QUOTA_POLICY": str(path)}) as started:
        yield started


@pytest.fixture(scope="module")
def proxy(stack: Stack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """`mcp-quota-proxy` over HTTP in front of the tags server over stdio: its MCP URL
    and the upstream's record of deletions."""
    logs = tmp_path_factory.mktemp("approval-e2e-proxy")
    record = logs / "deletions.jsonl"
    upstream = ["--upstream-command", shlex.join(tags_command(record))]
    running: Running = spawn_proxy(upstream, stack.url, SERVER_TOKEN, logs, name="proxy-e2e32")
    try:
        wait_healthy(running, timeout=HEALTHY_WITHIN)
        yield f"{running.url}/mcp", record
    finally:
        running.stop()


def approve_link(stack: Stack, approval_id: str) -> str:
    """The approve link of the email asking for this approval, as the approver gets it."""
    deadline = time.monotonic() + EMAIL_WITHIN
    while time.monotonic() < deadline:
        for email in stack.inbox():
            if approval_id in email["Message"]:
                [link] = APPROVE.findall(email["Message"])
                return str(link)
    raise AssertionError(f"no approval email for {approval_id} within {EMAIL_WITHIN}s")


def click_approve(browser: Browser, link: str) -> None:
    """What the approver does: open the email's link, read the call, press Approve."""
    page = browser.new_context(viewport={"width": 390, "height": 844}).new_page()
    shown = page.goto(link)
    assert shown is not None and shown.status == 200
    expect(page.get_by_role("heading", name="Approve this call")).to_be_visible()
    page.get_by_role("button", name="Approve").click()
    expect(page.get_by_role("heading", name="Approved")).to_be_visible()
    page.context.close()


# -- the MCP Inspector CLI through the proxy ----------------------------------------


def inspector_delete(url: str, session: str, tag: str, call_id: str | None = None) -> Any:
    """One Inspector CLI process, one `tools/call` of `delete_tag` (naming its call if
    `call_id` is given): the tool result it printed."""
    meta = [f"{META_SESSION_KEY}={session}"]
    meta += [] if call_id is None else [f"{META_CALL_ID_KEY}={call_id}"]
    run = inspector(
        url,
        "tools/call",
        "--tool-name",
        "delete_tag",
        "--tool-arg",
        f"tag={tag}",
        "--tool-metadata",
        *meta,
    )
    result = run.result()
    # The CLI exits 5 on an `isError` result, and prints it all the same.
    assert run.returncode == (5 if result.get("isError") else 0), run.stderr[-2000:]
    return result


def test_the_inspector_cli_gets_through_an_approval_clicked_in_chromium(
    stack: Stack, proxy: tuple[str, Path], browser: Browser
) -> None:
    """Defect class: a client we did not write cannot get through an approval, its rerun
    after the click runs the upstream twice (or not at all), or one approval lets a
    further call run."""
    url, record = proxy
    session = f"e2e32-{uuid.uuid4().hex[:8]}"
    tag = f"{session}-old"

    def delete_tag() -> Any:
        return inspector_delete(url, session, tag)

    def runs() -> int:
        return sum(entry["tag"] == tag for entry in deletions(record))

    asked = delete_tag()
    assert asked["isError"] is True and runs() == 0
    structured = asked["structuredContent"]
    assert structured["kind"] == "approval_required"
    approval_id = structured["approvalId"]
    assert structured["url"].endswith(f"/console#/approvals/{approval_id}")
    text = asked["content"][0]["text"]
    assert structured["url"] in text and "Ask your user to approve it" in text

    click_approve(browser, approve_link(stack, approval_id))

    ran = delete_tag()
    assert ran.get("isError") in (None, False), ran
    assert ran["content"][0]["text"] == f"deleted tag '{tag}'"
    assert runs() == 1

    further = delete_tag()
    assert further["isError"] is True and runs() == 1
    assert further["structuredContent"]["kind"] == "approval_required"
    assert further["structuredContent"]["approvalId"] != approval_id


def test_an_inspector_re_send_of_the_approved_call_gets_what_it_did(
    stack: Stack, proxy: tuple[str, Path], browser: Browser
) -> None:
    """A client that names its call (`_meta` call id): after the click, the call runs
    once; a re-send of it under that id gets the upstream's result again, marked
    replayed, with no new approval and no email. (Defect class: a re-sent approved
    write asks a person again, or runs twice.)"""
    url, record = proxy
    session = f"e2e32-{uuid.uuid4().hex[:8]}"
    tag, call_id = f"{session}-named", f"{session}-call-1"
    asked = inspector_delete(url, session, tag, call_id)
    approval_id = asked["structuredContent"]["approvalId"]
    click_approve(browser, approve_link(stack, approval_id))

    ran = inspector_delete(url, session, tag, call_id)
    resent = inspector_delete(url, session, tag, call_id)
    assert ran["content"] == resent["content"] == [{"type": "text", "text": f"deleted tag '{tag}'"}]
    assert resent["_meta"][REPLAYED_META] is True and REPLAYED_META not in ran.get("_meta", {})
    assert sum(entry["tag"] == tag for entry in deletions(record)) == 1
    pending = call(f"{stack.url}/v1/approvals?state=pending", token=ADMIN_TOKEN)
    assert [a for a in pending.body["approvals"] if a["session_id"] == session] == []


# -- a FastMCP client through the FastMCP middleware ---------------------------------


@dataclass
class Vault:
    """A FastMCP server guarded by `QuotaMiddleware`, whose tool counts its own runs."""

    server: FastMCP
    quota: QuotaClient
    runs: Counter[int]


def vault(service_url: str) -> Vault:
    quota = QuotaClient(QuotaClientConfig(base_url=service_url, token=SERVER_TOKEN))
    server = FastMCP("vault")
    server.add_middleware(QuotaMiddleware(quota))
    runs: Counter[int] = Counter()

    @server.tool(annotations={"destructiveHint": True})
    async def wire_money(amount: int) -> str:
        runs[amount] += 1
        return f"wired {amount}"

    return Vault(server, quota, runs)


def test_a_fastmcp_client_with_url_elicitation_gets_through_an_approval(
    stack: Stack, browser: Browser
) -> None:
    """The client's URL elicitation names the console page; the approver approves with
    the email's link in Chromium while the handler waits; the client's retry (the same
    call) runs once; a re-send of it under its call id gets that run's result, with no
    new approval; the next call is asked about again.

    Defect class: the elicitation's retry is a new call (a new approval, or a second
    run), a re-send of the approved call asks a human again instead of getting what it
    did, or the agent's client is handed a page it could approve on without signing in.

    The FastMCP client runs in a thread of its own: Playwright's sync API holds this one.
    """
    guarded = vault(stack.url)
    session = f"e2e32-{uuid.uuid4().hex[:8]}"
    meta = {META_SESSION_KEY: session}
    call = {**meta, META_CALL_ID_KEY: f"{session}-wire-7"}  # a client that names its calls
    asked: queue.Queue[mt.ElicitRequestURLParams] = queue.Queue()
    clicked = threading.Event()
    results: list[mt.CallToolResult] = []
    failed: list[Exception] = []

    async def user_opens_the_page(
        message: str, response_type: object, params: Any, context: object
    ) -> Any:
        assert isinstance(params, mt.ElicitRequestURLParams)
        asked.put(params)
        if not await asyncio.to_thread(clicked.wait, 60):
            return mt.ElicitResult(action="cancel")
        return mt.ElicitResult(action="accept")

    async def agent() -> None:
        try:
            async with Client(guarded.server, elicitation_handler=user_opens_the_page) as client:
                results.append(await client.call_tool_mcp("wire_money", {"amount": 7}, meta=call))
                # A re-send of the approved call (its answer lost, say): the same call id.
                results.append(await client.call_tool_mcp("wire_money", {"amount": 7}, meta=call))
            async with Client(guarded.server) as plain:  # no elicitation: the isError path
                results.append(await plain.call_tool_mcp("wire_money", {"amount": 7}, meta=meta))
        except Exception as exc:  # shown by the test, not lost in the thread
            failed.append(exc)
        finally:
            await guarded.quota.aclose()

    thread = threading.Thread(target=asyncio.run, args=(agent(),), daemon=True)
    thread.start()
    params = asked.get(timeout=60)
    approval_id = params.url.rsplit("/", 1)[-1]
    assert params.url.endswith(f"/console#/approvals/{approval_id}")
    assert "needs an administrator's approval" in params.message
    assert guarded.runs[7] == 0  # nothing ran while the approval is pending

    page = browser.new_context(viewport={"width": 1200, "height": 800}).new_page()
    page.goto(params.url)  # the page the client shows its user: it asks for a sign-in
    expect(page.get_by_text("Use a token instead")).to_be_visible()
    page.context.close()
    click_approve(browser, approve_link(stack, approval_id))
    clicked.set()
    thread.join(timeout=60)
    assert not thread.is_alive() and not failed, failed

    ran, resent, further = results
    assert not ran.is_error, ran
    assert [block.text for block in ran.content if isinstance(block, mt.TextContent)] == ["wired 7"]
    assert not resent.is_error and resent.content == ran.content
    assert (resent.meta or {}).get(REPLAYED_META) is True
    assert not (ran.meta or {}).get(REPLAYED_META)
    assert guarded.runs[7] == 1 and asked.empty()  # one page, one run
    assert further.is_error and guarded.runs[7] == 1
    assert further.structured_content is not None
    assert further.structured_content["kind"] == "approval_required"
    assert further.structured_content["approvalId"] != approval_id
