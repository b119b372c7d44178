"""Escalation suspends a principal that ignored N refusals in a row in one category, and
nobody else: not the next caller after a tenant ceiling's refusals, not a principal just
resumed, not an agent that works on in the refused category."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.api.conftest import Api, body, running_api
from tests.api.test_scopes import POLICY, scoped, write
from tests.support import FixedClock

__all__ = ["scoped"]  # the fixture, used by name
N = int(str(POLICY["suspend_after_refusals"]))  # 6


def principal_state(api: Api, principal: str) -> str:
    response = api.get(f"/v1/principals/{principal}")
    return str(body(response)["state"]) if response.status_code == 200 else "unseen"


def read(api: Api, session: str, principal: str) -> Any:
    return api.check(session_id=session, tool="search_articles", principal=principal)


def escalation_emails(api: Api) -> int:
    return sum(1 for sent in api.sent() if "SUSPENDED" in str(sent[1]))


def test_a_tenant_ceiling_never_suspends_principals_making_their_first_write(
    scoped: Api,
) -> None:
    for i in range(8):  # the tenant's 8 writes, by 8 principals
        assert write(scoped, f"fill-{i}", f"filler-{i}").status_code == 200
    for i in range(3 * N):  # the ceiling refuses again and again, many callers
        assert write(scoped, f"loop-{i}", f"looper-{i % 2}").status_code == 429
    answers = [write(scoped, f"new-{i}", f"newcomer-{i}") for i in range(10)]
    assert {body(a)["error"]["scope"] for a in answers} == {"tenant"}
    assert all(principal_state(scoped, f"newcomer-{i}") == "active" for i in range(10))
    assert all(principal_state(scoped, f"filler-{i}") == "active" for i in range(8))
    # The two loopers each ignored 9 refusals in a row: those two, and only those.
    assert principal_state(scoped, "looper-0") == "suspended"
    assert principal_state(scoped, "looper-1") == "suspended"
    assert escalation_emails(scoped) == 2


def test_a_resumed_principal_gets_a_fresh_streak(scoped: Api) -> None:
    def later() -> Any:
        scoped.clock.advance(1)
        return write(scoped, "s", "bot")

    codes = [later().status_code for i in range(3 + N)]
    assert codes == [200] * 3 + [429] * N  # the session's 3, then N refusals in it
    assert principal_state(scoped, "bot") == "suspended"
    resumed = scoped.admin("/v1/principals/bot/resume", {"reason": "loop fixed"})
    assert resumed.status_code == 200
    for _ in range(N - 1):  # still refused by its spent session, not N in a row yet
        refused = later()
        assert body(refused)["error"]["code"] == "quota_exceeded"
        assert principal_state(scoped, "bot") == "active"
    assert body(later())["error"]["code"] == "quota_exceeded"
    assert principal_state(scoped, "bot") == "suspended"
    assert escalation_emails(scoped) == 2  # one per suspension


def test_a_list_then_delete_loop_is_suspended_after_n_refused_deletes(scoped: Api) -> None:
    """Escalation misses the incident's own pattern: an allowed read between refused
    writes ended the streak, so a list-then-delete loop was never suspended. Only an
    allowed call in the refused category ends it."""

    def later(call: Any) -> int:
        scoped.clock.advance(1)
        return int(call(scoped, "work", "bot").status_code)

    assert [later(write) for _ in range(3)] == [200] * 3
    for _ in range(N - 1):  # the session's writes spent: list, then delete, refused
        assert [later(read), later(write)] == [200, 429]
        assert principal_state(scoped, "bot") == "active"
    assert [later(read), later(write)] == [200, 429]  # the N-th refused delete
    assert principal_state(scoped, "bot") == "suspended"
    assert escalation_emails(scoped) == 1


def test_a_list_then_delete_loop_over_fresh_sessions_is_suspended(scoped: Api) -> None:
    """Escalation misses the incident's own pattern: refused by its principal budget, in
    a new session each time, after an allowed read in that session."""

    def later(call: Any, session: str) -> int:
        scoped.clock.advance(1)
        return int(call(scoped, session, "bot").status_code)

    assert [later(write, f"fill-{i}") for i in range(5)] == [200] * 5  # the principal's 5
    codes = [(later(read, f"loop-{i}"), later(write, f"loop-{i}")) for i in range(N)]
    assert codes == [(200, 429)] * (N - 1) + [(200, 429)]
    assert principal_state(scoped, "bot") == "suspended"


def test_an_allowed_call_in_the_refused_category_ends_the_streak(scoped: Api) -> None:
    """Escalation misses the incident's own pattern: an agent refused now and then that
    goes on working in the refused category is never suspended."""

    def later(session: str) -> int:
        scoped.clock.advance(1)
        return int(write(scoped, session, "bot").status_code)

    codes = [later("a") for _ in range(4)]  # the session's 3, then one refusal
    assert codes == [200, 200, 200, 429]
    assert [later("b"), later("b")] == [200, 200]  # normal work: the principal's 5
    assert [later("c") for _ in range(N - 1)] == [429] * (N - 1)  # N - 1 from 0
    assert principal_state(scoped, "bot") == "active"


def test_the_suspension_email_names_the_suspension_and_suggests_resume(scoped: Api) -> None:
    for _ in range(3 + N):  # the session's 3, then N refusals in it
        scoped.clock.advance(1)
        write(scoped, "s", "bot")
    assert principal_state(scoped, "bot") == "suspended"
    [email] = [sent[1] for sent in scoped.sent() if "SUSPENDED" in str(sent[1])]
    assert "(the budget that refused the call)" not in email
    assert "suspended:  principal 'bot'" in email
    assert "refused by: the session's 'write' budget" in email
    commands = email.split("What you can do", 1)[1].splitlines()[1]
    assert commands.split()[:4] == ["resume:", "mcp-quota", "principal", "resume"]


@pytest.fixture(params=["memory", "dynamodb"])
def small(request: pytest.FixtureRequest, tmp_path: Path, clock: FixedClock) -> Iterator[Api]:
    """The API with two small session budgets and no wider ones."""
    policy = tmp_path / "small.json"
    small_policy = {**POLICY, "categories": {"read": {"limit": 3}, "write": {"limit": 2}}}
    policy.write_text(json.dumps(small_policy))
    with running_api(clock, request.param, policy=str(policy)) as api:
        yield api


def test_refusals_in_two_categories_are_two_streaks(small: Api) -> None:
    """Escalation misses the incident's own pattern: a streak follows one category, so
    refusals in two categories do not add up to a suspension, and an allowed call in one
    never ends the other's streak."""

    def later(call: Any) -> int:
        small.clock.advance(1)
        return int(call(small, "s", "bot").status_code)

    assert [later(read) for _ in range(3)] + [later(write), later(write)] == [200] * 5
    for _ in range(N - 1):  # both spent: N - 1 refusals in each, alternating
        assert [later(write), later(read)] == [429, 429]
    assert principal_state(small, "bot") == "active"
    assert body(small.get("/v1/principals/bot"))["streaks"] == {"read": N - 1, "write": N - 1}
    assert later(write) == 429  # the N-th refused write
    assert principal_state(small, "bot") == "suspended"
