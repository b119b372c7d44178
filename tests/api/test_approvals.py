"""Approvals of single calls (issue 32) over HTTP, through the real authorizer: the
done-when line 1 of the issue, and the refusals around it."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from chalicelib.quota.policy import parse_policy
from tests.api.conftest import ADMIN, SERVER, Api, body, running_api
from tests.support import FixedClock

DIGEST_A = hashlib.sha256(b'{"id":1}').hexdigest()
DIGEST_B = hashlib.sha256(b'{"id":2}').hexdigest()


def approval_policy(api: Api) -> None:
    """A policy where each call of `drop_table` needs an approval."""
    document: dict[str, Any] = {
        "version": 1,
        "categories": {
            "read": {"limit": 200},
            "write": {"limit": 15},
        },
        "approval_seconds": 600,
        "rules": [{"tools": ["drop_table"], "category": "write", "approval": True}],
    }
    policy = parse_policy(document)
    api.container.__dict__["policy"] = policy


def drop(api: Api, digest: str | None = DIGEST_A, **extra: Any) -> Any:
    fields: dict[str, Any] = {"session_id": "s1", "tool": "drop_table", **extra}
    if digest is not None:
        fields["args_digest"] = digest
    return api.check(**fields)


@pytest.fixture(params=["memory", "dynamodb"])
def approving(request: pytest.FixtureRequest, clock: FixedClock) -> Iterator[Api]:
    """The API with an approval rule, on memory and on moto's DynamoDB."""
    with running_api(clock, request.param) as api:
        approval_policy(api)
        yield api


def test_the_approval_flow_end_to_end(approving: Api) -> None:
    """Done-when 1: refused with an id; a server token cannot approve; an admin does;
    other arguments still refused; 8 concurrent retries run once; the next one needs a
    new approval; the audit shows each step. (Defect class: a call run twice on one
    human approval, or approved by the agent's own token.)"""
    api = approving
    first = drop(api, arguments_preview='{"id": 1}')
    assert first.status_code == 403
    error = body(first)["error"]
    assert error["code"] == "approval_required"
    approval = body(first)["approval"]
    assert approval["id"].startswith("ap_") and approval["console_url"].endswith(approval["id"])
    # Asked again while pending: the same approval, not a second one.
    assert body(drop(api))["approval"]["id"] == approval["id"]
    path = f"/v1/approvals/{approval['id']}"
    assert api.post(f"{path}/approve", {}, SERVER).status_code == 403
    assert body(api.get("/v1/approvals?state=pending"))["approvals"][0]["id"] == approval["id"]
    granted = api.admin(f"{path}/approve", {"reason": "ticket 42"})
    assert granted.status_code == 200, granted.body
    assert body(granted)["state"] == "approved"
    other = drop(api, DIGEST_B)
    assert body(other)["error"]["code"] == "approval_required"
    assert body(other)["approval"]["id"] != approval["id"]
    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(lambda _: drop(api), range(8)))
    allowed = [a for a in answers if a.status_code == 200]
    assert len(allowed) == 1, [a.body for a in answers]
    assert body(allowed[0])["allowed"] is True
    assert all(body(a)["error"]["code"] == "approval_required" for a in answers if a not in allowed)
    assert body(api.get(path))["state"] == "used"
    again = drop(api)
    assert body(again)["error"]["code"] == "approval_required"
    assert body(again)["approval"]["id"] != approval["id"]
    emails = [m for m in api.sent() if "drop_table" in m[1] and '{"id": 1}' in m[1]]
    assert len(emails) == 1 and approval["id"] in emails[0][1]
    events = [e["type"] for e in body(api.get("/v1/audit?session_id=s1"))["events"]]
    for kind in ("approval_requested", "approval_granted", "approval_used"):
        assert kind in events, events


def test_args_digest_is_required(approving: Api) -> None:
    """An approval binds the arguments: without their digest, 400 naming the field.
    (Defect class: an approval that covers any arguments.)"""
    answer = drop(approving, None)
    assert answer.status_code == 400
    assert body(answer)["error"]["field"] == "args_digest"


def test_denied_is_refused_as_denied(approving: Api) -> None:
    """A denied call answers approval_denied, and cannot be approved after."""
    approval_id = body(drop(approving))["approval"]["id"]
    path = f"/v1/approvals/{approval_id}"
    assert approving.admin(f"{path}/deny", {"reason": "no"}).status_code == 200
    denied = drop(approving)
    assert denied.status_code == 403
    assert body(denied)["error"]["code"] == "approval_denied"
    assert approving.admin(f"{path}/approve", {}).status_code == 409


def test_expired_asks_anew(approving: Api, clock: FixedClock) -> None:
    """An approval past its expiry is not used: a new id is asked for."""
    approval_id = body(drop(approving))["approval"]["id"]
    approving.admin(f"/v1/approvals/{approval_id}/approve", {})
    clock.advance(601)
    answer = drop(approving)
    assert body(answer)["error"]["code"] == "approval_required"
    assert body(answer)["approval"]["id"] != approval_id
    old = body(approving.get(f"/v1/approvals/{approval_id}"))
    assert old["state"] == "expired"


def test_a_refused_count_gives_the_approval_back(approving: Api) -> None:
    """An approved call the budget refuses keeps its approval for a later try.
    (Defect class: an approval consumed by a call that never ran.)"""
    approving.container.__dict__["policy"] = parse_policy(
        {
            "version": 1,
            "categories": {"read": {"limit": 200}, "write": {"limit": 1}},
            "rules": [{"tools": ["drop_table"], "category": "write", "approval": True}],
        }
    )
    assert approving.check(session_id="s1", tool="other_write", category="write").status_code == 200
    approval_id = body(drop(approving))["approval"]["id"]
    approving.admin(f"/v1/approvals/{approval_id}/approve", {})
    refused = drop(approving)
    assert refused.status_code == 429
    assert body(approving.get(f"/v1/approvals/{approval_id}"))["state"] == "approved"


def test_a_viewer_lists_but_cannot_approve(approving: Api) -> None:
    """Viewers read approvals; approving needs an operator or an admin."""
    approval_id = body(drop(approving))["approval"]["id"]
    _, viewer = approving.token("default", "viewer")
    assert approving.get("/v1/approvals", viewer).status_code == 200
    answer = approving.post(f"/v1/approvals/{approval_id}/approve", {}, viewer)
    assert answer.status_code == 403
    assert ADMIN  # the admin approves in the flow above


def test_a_retry_of_an_approved_call_that_ran_gets_its_kept_result(approving: Api) -> None:
    """After the approved call ran, a retry under its call id is answered like any
    duplicate in a replaying category: the first run's kept result, not counted, and no
    new approval asked for (nor emailed); a copy past its duplicates too. Another call id
    (a new call) still needs a new approval. (Defect class: a broken stream's re-send of
    an approved write asks a human again, or is not answered with what the write did.)"""
    api = approving
    approval_id = body(drop(api, call_id="c1"))["approval"]["id"]
    api.admin(f"/v1/approvals/{approval_id}/approve", {})
    ran = drop(api, call_id="c1")
    assert ran.status_code == 200 and body(ran)["duplicate"] is False
    result = {"content": [{"type": "text", "text": "dropped"}], "isError": False}
    kept = {"session_id": "s1", "tool": "drop_table", "result": result}
    stored = api.client.http.put("/v1/results/c1", headers=SERVER, body=json.dumps(kept))
    assert stored.status_code == 201, stored.body
    emails = len(api.sent())

    for _ in range(5):  # 3 duplicates (MAX_REPLAYS), then copies past them
        again = drop(api, call_id="c1")
        assert again.status_code == 200, again.body
        answer = body(again)
        assert answer["duplicate"] is True and answer["used"] == 1
        assert answer["replay"] == {"state": "stored", "result": result}

    assert body(api.get("/v1/approvals?state=pending"))["approvals"] == []
    assert len(api.sent()) == emails
    new_call = drop(api, call_id="c2")
    assert body(new_call)["error"]["code"] == "approval_required"
    assert body(new_call)["approval"]["id"] != approval_id


def test_a_call_id_of_another_call_is_a_conflict_not_an_approval(approving: Api) -> None:
    """A call id that names another admitted call is answered 409 as for any tool, not
    with an approval for it (the approval would be for a call the id cannot run)."""
    api = approving
    approval_id = body(drop(api, call_id="c1"))["approval"]["id"]
    api.admin(f"/v1/approvals/{approval_id}/approve", {})
    assert drop(api, call_id="c1").status_code == 200
    other = drop(api, DIGEST_B, call_id="c1")
    assert other.status_code == 409, other.body
    assert body(other)["error"]["code"] == "call_id_conflict"
    assert body(api.get("/v1/approvals?state=pending"))["approvals"] == []


def test_approval_used_is_audited_in_the_session_that_used_it(approving: Api) -> None:
    """An approval binds tenant, principal, tool and args_digest, not the session: a
    call in another session of the principal uses it, and `approval_used` is recorded
    in that session, naming the one that asked. (Defect class: the audit of a session
    that ran the call lacks the approval it ran on.)"""
    api = approving
    approval_id = body(drop(api))["approval"]["id"]
    api.admin(f"/v1/approvals/{approval_id}/approve", {})
    ran = api.check(session_id="s2", tool="drop_table", args_digest=DIGEST_A)
    assert ran.status_code == 200, ran.body
    used = [
        e
        for e in body(api.get("/v1/audit?session_id=s2"))["events"]
        if e["type"] == "approval_used"
    ]
    assert len(used) == 1, used
    assert used[0]["detail"]["approval_id"] == approval_id
    assert used[0]["detail"]["requested_in_session"] == "s1"
    asked = [e["type"] for e in body(api.get("/v1/audit?session_id=s1"))["events"]]
    assert "approval_requested" in asked and "approval_used" not in asked
