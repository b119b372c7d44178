"""The approval email's signed one-click approve and deny links (issue 32), over the
in-process API: a GET confirms and changes nothing, the button's POST decides through
the same code as the admin API, once; expired and used links answer clear pages."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from chalicelib.quota.policy import parse_policy
from tests.api.conftest import Api, body, running_api
from tests.support import FixedClock

SECRET = "s" * 40
BASE = "http://links.test"
APPROVE = re.compile(r"approve this call[^\n]*:\n\s+(http://links\.test/actions/\S+)")
DENY = re.compile(r"deny this call[^\n]*:\n\s+(http://links\.test/actions/\S+)")
FORM = {"Content-Type": "application/x-www-form-urlencoded"}
DIGEST = hashlib.sha256(b'{"table":"users"}').hexdigest()
ARGS = '{"table": "users", "cascade": true}'


@pytest.fixture(params=["memory", "dynamodb"])
def linked(request: pytest.FixtureRequest, clock: FixedClock) -> Iterator[Api]:
    """The API with links set up and a tool whose every call needs an approval."""
    with running_api(clock, request.param, link_secret=SECRET, public_url=BASE) as api:
        _approval_policy(api)
        yield api


@pytest.fixture
def memory_linked(clock: FixedClock) -> Iterator[Api]:
    """The same on the memory backend, atomic under threads (moto is not)."""
    with running_api(clock, "memory", link_secret=SECRET, public_url=BASE) as api:
        _approval_policy(api)
        yield api


def _approval_policy(api: Api) -> None:
    document: dict[str, Any] = {
        "version": 1,
        "categories": {"read": {"limit": 200}, "write": {"limit": 15}},
        "approval_seconds": 600,
        "rules": [{"tools": ["drop_table"], "category": "write", "approval": True}],
    }
    api.container.__dict__["policy"] = parse_policy(document)


def drop(api: Api, session: str = "s1", digest: str = DIGEST) -> Any:
    return api.check(
        session_id=session,
        tool="drop_table",
        args_digest=digest,
        arguments_preview=ARGS,
        principal="db-agent",
        server="warehouse MCP",
    )


def ask(api: Api, session: str = "s1", digest: str = DIGEST) -> tuple[str, str, str]:
    """A check that asks for an approval; its id and the email's two links (paths)."""
    asked = drop(api, session, digest)
    assert body(asked)["error"]["code"] == "approval_required"
    approval_id = body(asked)["approval"]["id"]
    [text] = [m[1] for m in api.sent() if approval_id in m[1]]
    [approve] = APPROVE.findall(text)
    [deny] = DENY.findall(text)
    return approval_id, approve.removeprefix(BASE), deny.removeprefix(BASE)


def post(api: Api, path: str) -> Any:
    return api.client.http.post(path, headers=FORM, body=b"")


def events(api: Api, session: str = "s1") -> list[dict[str, Any]]:
    return list(body(api.get(f"/v1/audit?session_id={session}"))["events"])


def test_the_email_carries_an_approve_and_a_deny_link_and_the_call(linked: Api) -> None:
    """Defect class: an approver asked to decide without seeing the call, or a link the
    agent gets too (its answer holds the console URL only)."""
    asked = drop(linked)
    approval_id = body(asked)["approval"]["id"]
    assert b"/actions/" not in asked.body
    [text] = [m[1] for m in linked.sent() if approval_id in m[1]]
    for shown in ("drop_table", ARGS, "db-agent", "s1", "warehouse MCP", approval_id):
        assert shown in text
    [approve] = APPROVE.findall(text)
    [deny] = DENY.findall(text)
    assert approve != deny
    assert "expire with the approval at 2026-12-02T12:10:00Z" in text


def test_get_confirms_and_changes_nothing_post_approves_once(linked: Api) -> None:
    """Defect class: a mail scanner's prefetch approving a call; a link used twice."""
    approval_id, approve, _ = ask(linked)
    page = linked.client.http.get(approve)
    assert page.status_code == 200 and page.headers["Content-Type"].startswith("text/html")
    text = page.body.decode()
    assert '<form method="post">' in text and "drop_table" in text
    assert "&quot;table&quot;: &quot;users&quot;" in text and "warehouse MCP" in text
    assert body(linked.get(f"/v1/approvals/{approval_id}"))["state"] == "pending"

    done = post(linked, approve)
    assert done.status_code == 200, done.body
    assert b"Approved" in done.body
    shown = body(linked.get(f"/v1/approvals/{approval_id}"))
    assert shown["state"] == "approved" and shown["decided_by"] == "email-link"
    [granted] = [e for e in events(linked) if e["type"] == "approval_granted"]
    assert granted["actor"] == "email-link"
    assert granted["detail"]["approval_id"] == approval_id and granted["detail"]["link_id"]

    again = post(linked, approve)
    assert again.status_code == 410 and b"already used at 2026-12-02T12:00:00Z" in again.body
    assert linked.client.http.get(approve).status_code == 410
    assert drop(linked).status_code == 200
    after = drop(linked)
    assert body(after)["error"]["code"] == "approval_required"
    assert body(after)["approval"]["id"] != approval_id


def test_the_deny_link_answers_approval_denied_at_the_next_check(linked: Api) -> None:
    """The denial is the admin API's: audited with the link as actor, and the other
    link of the email then says the call was already decided."""
    approval_id, approve, deny = ask(linked)
    assert b"Deny" in linked.client.http.get(deny).body
    assert post(linked, deny).status_code == 200
    refused = drop(linked)
    assert refused.status_code == 403
    assert body(refused)["error"]["code"] == "approval_denied"
    [denied] = [e for e in events(linked) if e["type"] == "approval_denied"]
    assert denied["actor"] == "email-link" and denied["detail"]["link_action"] == "deny"

    late = post(linked, approve)
    assert late.status_code == 409
    assert b"Already done by email-link" in late.body and b"denied" in late.body
    assert body(linked.get(f"/v1/approvals/{approval_id}"))["state"] == "denied"
    assert "approval_granted" not in {e["type"] for e in events(linked)}


def test_an_expired_link_is_refused_with_a_clear_page(linked: Api, clock: FixedClock) -> None:
    """The links expire with the approval (600 s here), not in the raise links' 24 h."""
    approval_id, approve, deny = ask(linked)
    clock.advance(601)
    for path in (approve, deny):
        page = linked.client.http.get(path)
        assert page.status_code == 410
        assert b"expired" in page.body and approval_id.encode() in page.body
        assert b"Traceback" not in page.body
        assert post(linked, path).status_code == 410
    assert body(linked.get(f"/v1/approvals/{approval_id}"))["state"] == "expired"
    assert not {"approval_granted", "approval_denied"} & {e["type"] for e in events(linked)}


def test_a_decision_in_the_console_first_makes_the_link_say_so(linked: Api) -> None:
    approval_id, approve, _ = ask(linked)
    linked.admin(f"/v1/approvals/{approval_id}/approve", {"reason": "ticket 7"})
    page = linked.client.http.get(approve)
    assert page.status_code == 409 and b"Already done by dev-admin" in page.body
    assert post(linked, approve).status_code == 409
    kinds = [e["type"] for e in events(linked)]
    assert kinds.count("approval_granted") == 1 and "link_declined" in kinds


def test_eight_concurrent_clicks_make_one_decision(memory_linked: Api) -> None:
    """Defect class: a double click (or a scanner and a human) deciding twice."""
    api = memory_linked
    _, approve, _ = ask(api)
    with ThreadPoolExecutor(8) as pool:
        statuses = list(pool.map(lambda _: post(api, approve).status_code, range(8)))
    assert sorted(statuses) == [200] + [410] * 7, statuses
    # Both links of another approval, clicked at once: one decision all the same.
    _, approve2, deny2 = ask(api, "s2", "b" * 64)
    with ThreadPoolExecutor(8) as pool:
        mixed = list(pool.map(lambda i: post(api, [approve2, deny2][i % 2]), range(8)))
    assert [m.status_code for m in mixed].count(200) == 1, [m.body for m in mixed]
    decisions = [
        e
        for s in ("s1", "s2")
        for e in events(api, s)
        if e["type"] in ("approval_granted", "approval_denied")
    ]
    assert len(decisions) == 2, decisions
