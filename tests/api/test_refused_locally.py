"""Refusals a client answered itself during a refusal's hold, reported with its next check
(`refused_locally`): issue 22 counted them for escalation and in the session's last calls;
issue 28 counts only what the service vouched for, with the refusal's hold ticket. On the
memory backend and moto."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from chalicelib.check.afterwards import settle_all
from chalicelib.check.escalation import STREAK_BATCH_MS
from tests.api.conftest import Api, body, running_api
from tests.api.test_escalation import escalation_emails, principal_state
from tests.support import FixedClock

N = 6  # suspend_after_refusals
SECRET = "k" * 40  # the link key, from which the service signs hold tickets
POLICY = {
    "version": 1,
    "categories": {
        "read": {"limit": 10, "lease": True, "principal": {"limit": 10, "window": "24h"}},
        "write": {
            "limit": 3,
            "notify": True,
            "principal": {"limit": 5, "window": "24h"},
            "tenant": {"limit": 8, "window": "1h"},
        },
    },
    "suspend_after_refusals": N,
    "rules": [
        {"pattern": "delete_*", "category": "write"},
        {"pattern": "search_*", "category": "read"},
    ],
}


@pytest.fixture(params=["memory", "dynamodb"])
def scoped(request: pytest.FixtureRequest, tmp_path: Path, clock: FixedClock) -> Iterator[Api]:
    """The API with a small scoped policy and a link key, on both backends (moto)."""
    policy = tmp_path / "scoped.json"
    policy.write_text(json.dumps(POLICY))
    with running_api(clock, request.param, policy=str(policy), link_secret=SECRET) as api:
        yield api


def held(count: int, ticket: str | None) -> Any:
    """A report as the client sends it: with the hold's ticket, or the old bare count."""
    return count if ticket is None else {"count": count, "ticket": ticket}


def write(
    api: Api,
    session: str,
    count: int | None = None,
    ticket: str | None = None,
    principal: str = "bot",
    **extra: Any,
) -> Any:
    payload: dict[str, Any] = {"session_id": session, "tool": "delete_tag", "principal": principal}
    if count is not None:
        payload["refused_locally"] = {"write": held(count, ticket)}
    return api.check(**payload, **extra)


def refused(api: Api, session: str, principal: str = "bot") -> str | None:
    """Spend the session's writes; the ticket of the refusal that follows (if any)."""
    for _ in range(6):
        answer = write(api, session, principal=principal)
        if answer.status_code == 429:
            ticket = body(answer).get("hold_ticket")
            return None if ticket is None else str(ticket)
        assert answer.status_code == 200, body(answer)
    raise AssertionError("never refused")


def streak(api: Api, principal: str = "bot") -> int:
    return int(body(api.get(f"/v1/principals/{principal}"))["refusals_in_a_row"])


def recorded_streak(api: Api, principal: str = "bot") -> int:
    """The principal's streak once the refusals a runaway loop's container held back
    (issue 29: sent within `STREAK_BATCH_MS`) are recorded: right after its next check's
    answer (`check.afterwards`)."""
    api.clock.advance(STREAK_BATCH_MS // 1000 + 1)
    assert api.check(session_id="elsewhere", tool="search_x").status_code == 200
    assert settle_all(10)
    return streak(api, principal)


# -- what a ticket makes count (issue 22's behaviour, now vouched for) -------------------


def test_a_refusal_with_nothing_left_carries_a_hold_ticket(scoped: Api) -> None:
    ticket = refused(scoped, "s")
    assert ticket is not None and ticket.startswith("h1-")
    assert "hold_ticket" not in body(scoped.check(session_id="r", tool="search_x"))


def test_held_refusals_count_toward_escalation(scoped: Api) -> None:
    ticket = refused(scoped, "s")
    assert principal_state(scoped, "bot") == "active"  # a streak of 1
    # The client held N - 1 more; with them the streak reaches N: suspended at once.
    answer = body(write(scoped, "s", N - 1, ticket))
    assert answer["error"]["code"] == "principal_suspended"
    assert principal_state(scoped, "bot") == "suspended"
    assert escalation_emails(scoped) == 1


def test_fewer_held_refusals_do_not_escalate(scoped: Api) -> None:
    ticket = refused(scoped, "s")
    assert body(write(scoped, "s", N - 3, ticket))["error"]["code"] == "quota_exceeded"
    assert principal_state(scoped, "bot") == "active"  # streak 1 + (N - 3) + 1 = N - 1
    assert write(scoped, "s").status_code == 429  # the Nth refusal in a row
    assert principal_state(scoped, "bot") == "suspended"


def test_held_refusals_are_folded_into_the_refusal_record(scoped: Api) -> None:
    ticket = refused(scoped, "f")
    assert write(scoped, "f", 3, ticket).status_code == 429
    calls = body(scoped.get("/v1/sessions/f"))["last_calls"]
    # The first refusal, the 3 the client held and the check that reported them.
    assert calls[-1]["allowed"] is False and calls[-1]["repeats"] == 5, calls


@pytest.mark.parametrize(
    "report",
    [
        {"nope": 1},
        {"write": -1},
        {"write": "3"},
        [1],
        {"write": {"count": "3", "ticket": "t"}},
        {"write": {"count": 3, "ticket": 5}},
        {"write": {"count": 3, "ticket": "a b"}},
        {"write": {"count": 3, "ticket": "t", "more": 1}},
        {"write": {"ticket": "t"}},
    ],
)
def test_a_malformed_report_is_rejected(scoped: Api, report: Any) -> None:
    response = scoped.check(session_id="m", tool="delete_tag", refused_locally=report)
    assert response.status_code == 400
    assert body(response)["error"]["field"].startswith("refused_locally")


def test_held_refusals_reach_the_metrics(scoped: Api, capsys: pytest.CaptureFixture[str]) -> None:
    ticket = refused(scoped, "metrics")
    capsys.readouterr()
    write(scoped, "metrics", 3, ticket)
    metrics = [line for line in capsys.readouterr().out.splitlines() if '"_aws"' in line]
    assert any('"RefusedLocally":[3.0]' in line for line in metrics), metrics
    assert any('"ChecksBlocked":[3.0]' in line for line in metrics), metrics


# -- issue 28: what the client reports is trusted ----------------------------------------


def test_a_report_without_a_ticket_suspends_nobody(
    scoped: Api, capsys: pytest.CaptureFixture[str]
) -> None:
    """Defect class: what the client reports is trusted. One check carrying
    `refused_locally: {"write": 50}` suspended a principal the service never refused."""
    capsys.readouterr()
    answer = write(scoped, "s", 50)
    assert answer.status_code == 200, body(answer)
    assert principal_state(scoped, "bot") in ("active", "unseen")
    metrics = [line for line in capsys.readouterr().out.splitlines() if '"_aws"' in line]
    assert any('"RefusedLocallyUnverified":[50.0]' in line for line in metrics), metrics
    assert not any('"RefusedLocally":' in line for line in metrics), metrics


def test_a_forged_or_foreign_ticket_counts_nothing(scoped: Api) -> None:
    """Defect class: what the client reports is trusted. A ticket counts only as signed,
    unexpired, and for this tenant, session and category."""
    ticket = refused(scoped, "s")
    other = refused(scoped, "elsewhere", "carol")
    assert ticket is not None and other is not None
    version, payload, mac = ticket.split(".")
    forged = [
        "h1-00000000.e30.AAAA",  # not ours
        f"{version}.{payload}x.{mac}",  # payload altered
        f"{version}.{payload}.{mac[::-1]}",  # signature altered
        other,  # another session's ticket
    ]
    for bad in forged:
        assert write(scoped, "s", N, bad).status_code == 429  # the session's own refusal
    read = scoped.check(
        session_id="s", tool="search_x", principal="bot", refused_locally={"read": held(N, ticket)}
    )
    assert read.status_code == 200  # a write's ticket does not vouch for reads
    assert principal_state(scoped, "bot") == "active"


def test_an_expired_ticket_counts_nothing(scoped: Api) -> None:
    """Defect class: what the client reports is trusted. A ticket lives the longest hold
    plus a minute: later, its report counts nothing."""
    ticket = refused(scoped, "s")
    scoped.clock.advance(66)
    assert body(write(scoped, "s", N, ticket))["error"]["code"] == "quota_exceeded"
    assert principal_state(scoped, "bot") == "active"


def test_held_refusals_count_to_the_principal_the_ticket_names(scoped: Api) -> None:
    """Defect class: what the client reports is trusted. In a session shared by two
    principals, the looper's held refusals were charged to whoever called next (bob
    suspended after 5 calls, the looping alice never)."""
    ticket = refused(scoped, "shared", "alice")
    for _ in range(5):  # the session's report rides on bob's next checks
        answer = write(scoped, "shared", N - 1, ticket, principal="bob")
        assert body(answer)["error"]["code"] == "quota_exceeded"
        assert body(answer)["principal"] == "bob"
    assert principal_state(scoped, "alice") == "suspended"
    assert principal_state(scoped, "bob") == "active"


def test_a_replayed_ticket_counts_once(scoped: Api) -> None:
    """Defect class: what the client reports is trusted. A ticket is claimed by the
    report that uses it: the same report again counts nothing."""
    ticket = refused(scoped, "s")
    for _ in range(2):
        # Past the second in which a repeat is refused from memory (issue 29), its streak
        # counted only with the next refusal sent: this test reads the stored streak.
        scoped.clock.advance(1)
        assert write(scoped, "s", 2, ticket).status_code == 429
    assert recorded_streak(scoped) == 1 + 2 + 2  # the first refusal, the report once, 2 checks
    assert principal_state(scoped, "bot") == "active"


def test_a_report_sent_with_a_409_counts_once(scoped: Api) -> None:
    """Defect class: what the client reports is trusted. A report sent with a check
    answered 409 was counted, then sent again by the client and counted again."""
    assert write(scoped, "s", call_id="c-1").status_code == 200
    ticket = refused(scoped, "s")
    conflict = scoped.check(
        session_id="s",
        tool="delete_other",
        principal="bot",
        call_id="c-1",
        refused_locally={"write": held(2, ticket)},
    )
    assert conflict.status_code == 409
    scoped.clock.advance(1)  # past the second of repeats refused from memory (issue 29)
    assert write(scoped, "s", 2, ticket).status_code == 429  # the client sends it again
    assert recorded_streak(scoped) == 1 + 2 + 1  # the first refusal, the report once, the resend
    assert principal_state(scoped, "bot") == "active"


def test_a_lease_cut_to_what_remains_counts_the_report_once(scoped: Api) -> None:
    """Defect class: what the client reports is trusted. A lease cut to what a wider
    budget has left is checked again: the report went with it and counted twice."""
    for _ in range(5):  # the principal's reads: 5 of 10 left
        assert scoped.check(session_id="warm", tool="search_x", principal="bot").status_code == 200
    ticket = refused(scoped, "s")  # streak 1
    answer = scoped.check(
        session_id="s",
        tool="search_x",
        principal="bot",
        lease=10,
        refused_locally={"write": held(3, ticket)},
    )
    assert answer.status_code == 200, body(answer)  # 1 + 3: not 1 + 3 + 3 = 7 >= N
    assert body(answer)["lease"]["granted"] == 5  # what the principal's reads have left
    assert principal_state(scoped, "bot") == "active"
