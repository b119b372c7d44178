"""Escalation suspends a principal that ignored N refusals in a row, and nobody else:
not the next caller after a tenant ceiling's refusals, not a principal just resumed."""

from __future__ import annotations

from typing import Any

from tests.api.conftest import Api, body
from tests.api.test_scopes import POLICY, scoped, write

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


def test_an_allowed_call_in_the_session_ends_the_streak(scoped: Api) -> None:
    def later(call: Any) -> int:
        scoped.clock.advance(1)
        return int(call(scoped, "work", "bot").status_code)

    assert [later(write) for _ in range(3)] == [200] * 3
    for _ in range(4):  # session spent: refused, with reads going on between
        assert [later(write), later(write), later(read), later(write)] == [429, 429, 200, 429]
    assert principal_state(scoped, "bot") == "active"  # never 6 in a row
    assert [later(write) for _ in range(N)] == [429] * N
    assert principal_state(scoped, "bot") == "suspended"


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
