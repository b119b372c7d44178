"""Issue 11: budgets that follow the agent. A session budget inside a principal budget
inside a tenant ceiling, counted all or nothing, with refusals that name the scope, and
escalation that stops an agent ignoring refusals. On the memory backend and moto."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.api.conftest import Api, body, running_api
from tests.support import T0, FixedClock

DAY_MS = 86_400_000
POLICY = {
    "version": 1,
    "categories": {
        "read": {"limit": 50},
        "write": {
            "limit": 3,
            "notify": True,
            "principal": {"limit": 5, "window": "24h"},
            "tenant": {"limit": 8, "window": "1h"},
        },
    },
    "suspend_after_refusals": 6,
    "rules": [
        {"pattern": "delete_*", "category": "write"},
        {"pattern": "search_*", "category": "read"},
    ],
}


@pytest.fixture(params=["memory", "dynamodb"])
def scoped(request: pytest.FixtureRequest, tmp_path: Path, clock: FixedClock) -> Iterator[Api]:
    """The API with a small scoped policy, on both backends (DynamoDB is moto's)."""
    policy = tmp_path / "scoped.json"
    policy.write_text(json.dumps(POLICY))
    with running_api(clock, request.param, policy=str(policy)) as api:
        yield api


def write(api: Api, session: str, principal: str | None = "bot") -> Any:
    payload: dict[str, Any] = {"session_id": session, "tool": "delete_tag"}
    if principal is not None:
        payload["principal"] = principal
    return api.check(**payload)


def test_fresh_session_ids_still_hit_the_principal_ceiling(scoped: Api) -> None:
    answers = [write(scoped, f"fresh-{i}") for i in range(6)]
    assert [a.status_code for a in answers] == [200] * 5 + [429]
    refusal = body(answers[-1])
    assert refusal["error"]["code"] == "quota_exceeded"
    assert refusal["error"]["scope"] == "principal"
    assert "principal 'bot'" in refusal["error"]["message"]
    assert "refills at 2026-12-03T00:00:00Z" in refusal["error"]["message"]
    # Retry-After is the time until that scope refills: UTC midnight.
    assert answers[-1].headers["Retry-After"] == str(
        (T0 // DAY_MS + 1) * DAY_MS // 1000 - T0 // 1000
    )
    # All or nothing: the refused call is not counted in its session, nor in the tenant.
    assert body(scoped.get("/v1/sessions/fresh-5"))["categories"]["write"]["used"] == 0
    assert body(scoped.get("/v1/tenant"))["categories"]["write"]["used"] == 5
    shown = body(scoped.get("/v1/sessions/fresh-5"))["last_calls"]
    assert [c["allowed"] for c in shown] == [False]


def test_the_tenant_ceiling_holds_across_principals(scoped: Api) -> None:
    codes = [write(scoped, f"s{i}", f"p{i % 4}").status_code for i in range(10)]
    assert codes == [200] * 8 + [429] * 2
    refusal = body(write(scoped, "another", "p9"))
    assert refusal["error"]["scope"] == "tenant"
    assert all(
        body(scoped.get(f"/v1/principals/p{i}"))["categories"]["write"]["used"] <= 2
        for i in range(4)
    )
    # The principals that were refused by the tenant got their principal count back.
    assert body(scoped.get("/v1/principals/p9"))["categories"]["write"]["used"] == 0


def test_one_ratelimit_entry_per_scope(scoped: Api) -> None:
    response = write(scoped, "h")
    assert response.headers["RateLimit-Policy"] == (
        '"write";q=3;w=3600, "write-principal";q=5;w=86400, "write-tenant";q=8;w=3600'
    )
    remaining = response.headers["RateLimit"]
    assert remaining.startswith('"write";r=2;t=3600, "write-principal";r=4;t=')
    assert remaining.endswith('"write-tenant";r=7;t=3600')
    assert body(response)["scopes"]["principal"]["remaining"] == 4


def test_the_principal_budget_refills_at_the_next_window(scoped: Api) -> None:
    for i in range(5):
        assert write(scoped, f"d{i}").status_code == 200
    assert write(scoped, "d9").status_code == 429
    scoped.clock.advance(DAY_MS / 1000)
    assert write(scoped, "next-day").status_code == 200


def test_an_agent_ignoring_refusals_is_suspended_everywhere_with_one_email(
    scoped: Api,
) -> None:
    for i in range(5):
        write(scoped, f"hop-{i}")
    answers = [write(scoped, f"hop-{i}") for i in range(5, 20)]
    codes = [body(a)["error"]["code"] for a in answers]
    assert codes[:6] == ["quota_exceeded"] * 6  # suspend_after_refusals
    assert set(codes[6:]) == {"principal_suspended"}
    last = answers[-1]
    assert "Retry-After" not in last.headers and body(last)["retry_after_seconds"] is None
    # Every scope and category of that principal is refused, in any session.
    read = scoped.check(session_id="elsewhere", tool="search_articles", principal="bot")
    assert read.status_code == 429 and body(read)["error"]["code"] == "principal_suspended"
    assert write(scoped, "other", "someone-else").status_code == 200
    subjects = [sent[2] for sent in scoped.sent()]
    assert sum("bot suspended" in (s or "") for s in subjects) == 1
    principal = body(scoped.get("/v1/principals/bot"))
    assert principal["state"] == "suspended" and "automatic" in principal["suspended_reason"]
    resumed = scoped.admin("/v1/principals/bot/resume", {"reason": "fixed the loop"})
    assert resumed.status_code == 200
    again = scoped.check(session_id="elsewhere", tool="search_articles", principal="bot")
    assert again.status_code == 200, body(again)


def test_admin_levers_at_the_principal_scope_are_audited(scoped: Api) -> None:
    for i in range(5):
        write(scoped, f"m{i}")
    raised = scoped.admin(
        "/v1/principals/bot/raise", {"category": "write", "add": 2, "reason": "migration"}
    )
    assert raised.status_code == 200 and body(raised)["after"] == 7
    assert write(scoped, "m5").status_code == 200
    lowered = scoped.admin(
        "/v1/principals/bot/raise", {"category": "write", "limit": 6, "reason": "oops"}
    )
    assert lowered.status_code == 409
    reset = scoped.admin("/v1/principals/bot/reset", {"reason": "new batch"})
    assert body(reset)["principal"]["categories"]["write"]["used"] == 0
    suspended = scoped.admin("/v1/principals/bot/suspend", {"reason": "looks wrong"})
    assert body(suspended)["principal"]["state"] == "suspended"
    assert body(write(scoped, "m6"))["error"]["code"] == "principal_suspended"
    read = scoped.admin("/v1/principals/bot/raise", {"category": "read", "add": 1, "reason": "x"})
    assert read.status_code == 400 and body(read)["error"]["field"] == "category"
    events = body(scoped.get("/v1/audit?principal=bot"))["events"]
    levers = [e["type"] for e in reversed(events) if e["actor"].endswith("(admin)")]
    assert levers == ["principal_raised", "principal_reset", "principal_suspended"]
    assert {e["principal"] for e in events} == {"bot"}


def test_reads_keep_one_scope_and_cost_nothing_wider(scoped: Api) -> None:
    response = scoped.check(session_id="r", tool="search_articles", principal="bot")
    assert response.status_code == 200 and "scopes" not in body(response)
    assert body(scoped.get("/v1/tenant"))["categories"]["write"]["used"] == 0


def test_a_retried_call_id_refused_by_a_wider_budget_is_refused_again_not_a_503(
    scoped: Api,
) -> None:
    for i in range(5):
        assert write(scoped, f"c{i}").status_code == 200
    first = scoped.check(session_id="c9", tool="delete_tag", principal="bot", call_id="rpc-1")
    assert first.status_code == 429 and body(first)["error"]["scope"] == "principal"
    again = scoped.check(session_id="c9", tool="delete_tag", principal="bot", call_id="rpc-1")
    assert again.status_code == 429 and body(again)["error"]["scope"] == "principal"
    assert body(scoped.get("/v1/sessions/c9"))["categories"]["write"]["used"] == 0


def test_a_principal_budget_runs_out_once_per_window_audited_and_emailed_once(
    scoped: Api,
) -> None:
    for i in range(5):
        assert write(scoped, f"o{i}").status_code == 200
    for i in range(3):
        refused = write(scoped, f"o-more-{i}")
        assert body(refused)["error"]["scope"] == "principal"
    subjects = [sent[2] or "" for sent in scoped.sent()]
    assert sum("principal bot" in s for s in subjects) == 1
    events = [
        e
        for i in range(3)
        for e in body(scoped.get(f"/v1/audit?session_id=o-more-{i}"))["events"]
        if e["type"] == "quota_exceeded"
    ]
    assert len(events) == 1 and events[0]["detail"]["scope"] == "principal"
