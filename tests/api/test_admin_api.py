"""Refusals leave evidence and admins have levers: audit, email, raise, suspend, grants."""

from __future__ import annotations

from typing import Any

import pytest
from botocore.exceptions import EndpointConnectionError

from tests.api.conftest import ADMIN, SERVER, Api, body

DELETE = {"session_id": "cleanup-7", "tool": "delete_tag", "principal": "tag-bot"}


def statuses(api: Api, n: int, **payload: Any) -> list[int]:
    return [api.check(**payload).status_code for _ in range(n)]


def audit(api: Api, session: str | None = "cleanup-7") -> list[dict[str, Any]]:
    query = f"?session_id={session}" if session else ""
    response = api.get(f"/v1/audit{query}")
    assert response.status_code == 200
    events: list[dict[str, Any]] = body(response)["events"]
    return events


def test_the_incident_one_email_per_event_then_escalation_then_a_raise_of_ten(
    api: Api,
) -> None:
    answers = [api.check(**DELETE) for _ in range(400)]
    codes = [a.status_code for a in answers]
    assert codes.count(200) == 15 and codes.count(429) == 385 and codes[:15] == [200] * 15
    reasons = [body(a)["error"]["code"] for a in answers[15:]]
    # 50 refusals in a row (suspend_after_refusals) and the principal is suspended: the
    # loop is then stopped completely, in every session and every category.
    assert reasons[:50] == ["quota_exceeded"] * 50
    assert set(reasons[50:]) == {"principal_suspended"}
    assert body(answers[-1])["error"]["scope"] == "principal"
    assert (
        api.check(session_id="fresh", tool="search_articles", principal="tag-bot").status_code
        == 429
    )

    sent = api.sent()
    assert len(sent) == 2  # the exhaustion, then the suspension
    _, message, subject, attributes, _ = sent[0]
    assert subject is not None and len(subject) <= 100 and "\n" not in subject
    assert "cleanup-7" in subject and "write" in subject
    for needle in ("tenant:     demo", "tag-bot", "15/15", "delete_tag", "refused", "session"):
        assert needle in message
    assert "mcp-quota session raise 'cleanup-7' --category write" in message
    assert "mcp-quota session suspend 'cleanup-7'" in message
    assert "mcp-quota session reset 'cleanup-7'" in message
    assert attributes is not None
    assert attributes["tenant"]["Value"] == "demo"
    assert attributes["category"]["Value"] == "write"
    assert attributes["scope"]["Value"] == "session"
    _, escalated, subject, attributes, _ = sent[1]
    assert subject is not None and "tag-bot suspended" in subject
    assert "SUSPENDED" in escalated and attributes is not None
    assert attributes["event"]["Value"] == "principal_suspended"

    events = audit(api)
    blocks = [e for e in events if e["type"] == "quota_exceeded"]
    assert len(blocks) == 1
    detail = blocks[0]["detail"]
    assert detail["used"] == 15 and detail["limit"] == 15 and detail["principal"] == "tag-bot"
    assert detail["scope"] == "session"
    assert len(detail["last_calls"]) == 10 and detail["last_calls"][-1]["allowed"] is False
    assert [e["type"] for e in events].count("notification_sent") == 2
    assert [e["type"] for e in events].count("principal_suspended") == 1

    session = body(api.get("/v1/sessions/cleanup-7"))
    assert session["categories"]["write"]["refused"] == 50
    assert session["state"] == "blocked" and session["principal"] == "tag-bot"
    principal = body(api.get("/v1/principals/tag-bot"))
    assert principal["state"] == "suspended" and principal["categories"]["write"]["used"] == 15

    raised = api.admin(
        "/v1/sessions/cleanup-7/raise",
        {"category": "write", "add": 10, "reason": "finish the last batch"},
    )
    assert raised.status_code == 200
    assert body(raised)["before"] == 15 and body(raised)["after"] == 25
    resumed = api.admin("/v1/principals/tag-bot/resume", {"reason": "loop fixed"})
    assert resumed.status_code == 200 and body(resumed)["principal"]["state"] == "active"
    codes = statuses(api, 30, **DELETE)
    assert codes.count(200) == 10 and codes[:10] == [200] * 10
    assert len(api.sent()) == 3  # the raised limit ran out too: a new exhaustion
    raise_events = [e for e in audit(api) if e["type"] == "session_raised"]
    assert raise_events[0]["before"] == {"category": "write", "limit": 15}
    assert raise_events[0]["after"] == {"category": "write", "limit": 25}
    assert raise_events[0]["reason"] == "finish the last batch"
    assert raise_events[0]["actor"] == "dev-admin (admin)"
    resumes = [e for e in audit(api, None) if e["type"] == "principal_resumed"]
    assert resumes[0]["before"] == {"principal": "tag-bot", "state": "suspended"}


def test_reads_run_out_quietly_audited_but_no_email(api: Api) -> None:
    statuses(api, 203, session_id="r", tool="search_articles")
    assert api.sent() == []
    assert [e["type"] for e in audit(api, "r")] == ["quota_exceeded"]


def test_a_raise_never_lowers_and_is_capped(api: Api) -> None:
    statuses(api, 3, **DELETE)
    path = "/v1/sessions/cleanup-7/raise"
    lower = api.admin(path, {"category": "write", "limit": 10, "reason": "x"})
    assert lower.status_code == 409 and "never lower" in body(lower)["error"]["message"]
    capped = api.admin(path, {"category": "write", "limit": 5000, "reason": "x"})
    assert capped.status_code == 400 and body(capped)["error"]["field"] == "limit"
    no_reason = api.admin(path, {"category": "write", "limit": 20})
    assert no_reason.status_code == 400 and body(no_reason)["error"]["field"] == "reason"
    both = api.admin(path, {"category": "write", "limit": 20, "add": 1, "reason": "x"})
    assert both.status_code == 400


def test_suspend_is_a_kill_switch_and_resume_lifts_it(api: Api) -> None:
    statuses(api, 2, **DELETE)
    suspended = api.admin("/v1/sessions/cleanup-7/suspend", {"reason": "looping"})
    assert suspended.status_code == 200 and body(suspended)["session"]["state"] == "suspended"
    refused = api.check(session_id="cleanup-7", tool="search_articles")
    assert refused.status_code == 429
    assert body(refused)["error"]["code"] == "session_suspended"
    assert "Retry-After" not in refused.headers and body(refused)["retry_after_seconds"] is None
    assert "resumes" in body(refused)["error"]["message"]
    resumed = api.admin("/v1/sessions/cleanup-7/resume", {"reason": "fixed the loop"})
    assert body(resumed)["session"]["state"] == "active"
    assert api.check(**DELETE).status_code == 200
    types = [e["type"] for e in audit(api)]
    assert "session_suspended" in types and "session_resumed" in types


def test_reset_zeroes_the_counters(api: Api) -> None:
    statuses(api, 16, **DELETE)
    reset = api.admin("/v1/sessions/cleanup-7/reset", {"reason": "new batch"})
    assert body(reset)["session"]["categories"]["write"]["used"] == 0
    assert statuses(api, 16, **DELETE) == [200] * 15 + [429]


def test_session_view_and_idle_state(api: Api) -> None:
    statuses(api, 3, **DELETE)
    view = body(api.get("/v1/sessions/cleanup-7"))
    write = view["categories"]["write"]
    assert write == {
        "used": 3,
        "leased": 0,
        "limit": 15,
        "base_limit": 15,
        "raised_limit": None,
        "raised_until": None,
        "remaining": 12,
        "refused": 0,
        "refused_held": 0,
        "state": "active",
    }
    assert [c["tool"] for c in view["last_calls"]] == ["delete_tag"] * 3
    api.clock.advance(3601)
    idle = body(api.get("/v1/sessions/cleanup-7"))
    assert idle["state"] == "expired" and idle["categories"]["write"]["used"] == 0
    assert api.get("/v1/sessions/never-seen").status_code == 404


def test_a_grant_lifts_the_limit_for_its_principal_in_its_window(api: Api) -> None:
    grant = api.admin(
        "/v1/grants",
        {
            "principal": "migration-bot",
            "category": "write",
            "limit": 100,
            "starts_at": "2026-12-02T11:00:00Z",
            "ends_at": "2026-12-02T14:00:00Z",
            "reason": "content migration",
        },
    )
    assert grant.status_code == 201
    grant_id = body(grant)["grant"]["grant_id"]
    migration = {"session_id": "m1", "tool": "delete_tag", "principal": "migration-bot"}
    assert statuses(api, 101, **migration) == [200] * 100 + [429]
    assert statuses(api, 16, session_id="m2", tool="delete_tag") == [200] * 15 + [429]
    listed = body(api.get("/v1/grants"))["grants"]
    assert [g["grant_id"] for g in listed] == [grant_id]
    api.clock.advance(1)
    assert api.client.http.delete(f"/v1/grants/{grant_id}", headers=ADMIN).status_code == 200
    # Without the grant the principal's 24 h budget (100) is already spent: a new session
    # does not start it again.
    after = api.check(session_id="m3", tool="delete_tag", principal="migration-bot")
    assert after.status_code == 429 and body(after)["error"]["scope"] == "principal"
    assert body(api.get("/v1/sessions/m3"))["categories"]["write"]["used"] == 0
    grants = [e for e in audit(api, None) if e["type"].startswith("grant_")]
    assert [e["type"] for e in grants] == ["grant_deleted", "grant_created"]  # newest first
    assert {e["principal"] for e in grants} == {"migration-bot"}


@pytest.mark.parametrize(
    ("payload", "field"),
    [
        (
            {
                "category": "write",
                "limit": 50,
                "starts_at": "2026-12-02T11:00:00Z",
                "ends_at": "2026-12-02T14:00:00Z",
                "reason": "r",
            },
            "principal",
        ),
        (
            {
                "principal": "p",
                "category": "write",
                "limit": 50,
                "starts_at": "tomorrow",
                "ends_at": "2026-12-02T14:00:00Z",
                "reason": "r",
            },
            "starts_at",
        ),
        (
            {
                "principal": "p",
                "category": "write",
                "limit": 50,
                "starts_at": "2026-12-02T11:00:00Z",
                "ends_at": "2026-12-02T11:30:00Z",
                "reason": "r",
            },
            "ends_at",
        ),
        (
            {
                "principal": "p",
                "category": "write",
                "limit": 10,
                "starts_at": "2026-12-02T11:00:00Z",
                "ends_at": "2026-12-02T14:00:00Z",
                "reason": "r",
            },
            "limit",
        ),
    ],
)
def test_bad_grants_name_the_field(api: Api, payload: dict[str, Any], field: str) -> None:
    response = api.admin("/v1/grants", payload)
    assert response.status_code == 400 and body(response)["error"]["field"] == field


def test_admin_endpoints_are_tenant_scoped_and_admin_only(api: Api) -> None:
    statuses(api, 2, **DELETE)
    _, other_admin = api.token("acme", "admin")
    assert api.get("/v1/sessions/cleanup-7", other_admin).status_code == 404
    raised = api.admin(
        "/v1/sessions/cleanup-7/raise",
        {"category": "write", "limit": 20, "reason": "x"},
        other_admin,
    )
    assert raised.status_code == 200  # it raised acme's own (new) session, not demo's
    assert body(api.get("/v1/sessions/cleanup-7"))["categories"]["write"]["limit"] == 15
    assert audit(api) == [] or all(e["tenant"] == "demo" for e in audit(api))
    assert api.get("/v1/sessions/cleanup-7", SERVER).status_code == 403
    assert api.client.http.get("/v1/grants").status_code == 401


def test_audit_pages(api: Api) -> None:
    for i in range(5):
        api.clock.advance(1)
        api.admin("/v1/sessions/p/suspend", {"reason": f"r{i}"})
    first = body(api.get("/v1/audit?session_id=p&limit=2"))
    assert len(first["events"]) == 2 and first["next"]
    second = body(api.get(f"/v1/audit?session_id=p&limit=2&next={first['next']}"))
    reasons = [e["reason"] for e in first["events"] + second["events"]]
    assert reasons == ["r0", "r1", "r2", "r3"]
    bad = api.get("/v1/audit?session_id=other&next=" + first["next"])
    assert bad.status_code == 400 and body(bad)["error"]["field"] == "next"
    assert api.get("/v1/audit?since=yesterday").status_code == 400


def test_sns_outage_never_changes_a_decision_and_is_audited(api: Api) -> None:
    api.container.sns_notifier.target = api.container.settings.topic_arn + "-missing"
    assert statuses(api, 17, **DELETE) == [200] * 15 + [429, 429]
    types = [e["type"] for e in audit(api)]
    assert types == ["quota_exceeded", "notification_failed"]


def test_audit_write_failure_never_turns_a_block_into_an_allow(dynamo_api: Api) -> None:
    api = dynamo_api

    def fail(**_: Any) -> None:
        raise EndpointConnectionError(endpoint_url="http://audit.invalid")

    statuses(api, 15, **DELETE)
    api.container.dynamodb.meta.events.register("before-call.dynamodb.PutItem", fail)
    try:
        refused = api.check(**DELETE)
    finally:
        api.container.dynamodb.meta.events.unregister("before-call.dynamodb.PutItem", fail)
    assert refused.status_code == 429
    assert len(api.sent()) == 1  # the email still went out


def test_odd_admin_inputs_are_4xx(api: Api) -> None:
    far = {
        "principal": "p", "category": "write", "limit": 50,
        "starts_at": "2026-12-02T11:00:00Z", "ends_at": "9999-12-31T23:59:59-05:00",
        "reason": "r",
    }  # fmt: skip
    response = api.admin("/v1/grants", far)
    assert response.status_code == 400 and body(response)["error"]["field"] == "ends_at"
    assert body(api.get("/v1/grants"))["grants"] == []
    assert api.get("/v1/audit?session_id=s&limit=%C2%B2").status_code == 400
    forged = "eyJwayI6IHsiUyI6ICJkZW1vI3MifX0="  # {"pk": {"S": "demo#s"}}: no sort key
    assert api.get(f"/v1/audit?session_id=s&next={forged}").status_code == 400
    long_id = "g-" + "a" * 1100
    assert api.client.http.delete(f"/v1/grants/{long_id}", headers=ADMIN).status_code == 404


def test_a_session_named_like_the_tenant_scope_stays_a_session(api: Api) -> None:
    statuses(api, 16, session_id="~tenant", tool="delete_tag")
    assert {e["session_id"] for e in audit(api, None)} == {"~tenant"}
    assert audit(api, "~tenant")[0]["type"] == "quota_exceeded"


def test_subjects_stay_under_100_characters(api: Api) -> None:
    session = "mcp:" + "0" * 36 + "-long-session-name-for-the-subject-line"
    statuses(api, 16, session_id=session, tool="delete_tag")
    [(_, _, subject, _, _)] = api.sent()
    assert subject is not None and len(subject) < 100
