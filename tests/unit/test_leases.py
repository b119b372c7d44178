"""Leases in the pure core and the policy: calls counted at once, partial grants at the
end of a budget, the lease id, and which categories may lease."""

from __future__ import annotations

import copy
from dataclasses import replace
from typing import Any

import pytest

from chalicelib.quota.core import (
    Attempt,
    Lease,
    LeaseId,
    SessionKey,
    SessionSnapshot,
    Verdict,
)
from chalicelib.quota.errors import ConfigurationError
from chalicelib.quota.policy import load_policy, parse_policy
from chalicelib.quota.rules import admits, explain_refusal, partial_units
from tests.support import T0

HOUR = 3_600_000


def lease_attempt(units: int, base_limit: int = 10) -> Attempt:
    return Attempt(
        session=SessionKey("demo", "s1"),
        tool="search_articles",
        category="read",
        base_limit=base_limit,
        now_ms=T0,
        idle_ms=HOUR,
        check_id="chk001",
        units=units,
        leased=True,
    )


def session(used: int, raised: int | None = None) -> SessionSnapshot:
    return SessionSnapshot(
        last_seen_ms=T0 - 1000,
        started_ms=T0 - 5000,
        counts={"read": used},
        raised={} if raised is None else {"read": raised},
    )


def test_a_lease_fits_only_if_all_its_calls_fit_under_the_limit() -> None:
    assert admits(session(5), lease_attempt(5))  # 5 + 5 <= 10
    assert explain_refusal(session(6), lease_attempt(5)) is Verdict.OVER_LIMIT
    assert admits(None, lease_attempt(10))


def test_a_lease_that_does_not_fit_is_granted_what_remains() -> None:
    assert partial_units(session(6), lease_attempt(5)) == 4
    assert partial_units(session(9), lease_attempt(5)) == 1
    assert partial_units(session(10), lease_attempt(5)) == 0  # over the limit: refused
    assert partial_units(session(12), lease_attempt(5)) == 0


def test_a_raise_in_force_lifts_the_limit_for_a_lease_too() -> None:
    assert explain_refusal(session(8, raised=20), lease_attempt(5)) is Verdict.STALE
    assert explain_refusal(session(16, raised=20), lease_attempt(5)) is Verdict.OVER_LIMIT
    assert partial_units(session(16, raised=20), lease_attempt(5)) == 4


def test_one_call_is_counted_as_before() -> None:
    one = replace(lease_attempt(1), leased=False)
    assert admits(session(9), one)
    assert explain_refusal(session(10), one) is Verdict.OVER_LIMIT


def test_the_lease_id_names_the_grant_and_parses_back() -> None:
    lease = Lease("read", "a-b_9Z", 7, T0, T0 - 5000, T0 + 30_000, 10, 30)
    parsed = LeaseId.parse(lease.lease_id)
    assert parsed == LeaseId("read", "a-b_9Z", 7, T0, T0 - 5000)


@pytest.mark.parametrize(
    "text",
    ["", "read", "read.abc.0.1.1", "read.abc.1000.1.1", "Read.abc.1.1.1", "read.a.b.1.1.1"],
)
def test_anything_else_is_not_a_lease_id(text: str) -> None:
    assert LeaseId.parse(text) is None


DOC: dict[str, Any] = {
    "version": 1,
    "categories": {
        "read": {"limit": 200},
        "write": {"limit": 15},
        "lookup": {"limit": 50},
        "admin": {"limit": 2},
    },
}


def test_reads_lease_by_default_and_nothing_else_does() -> None:
    policy = parse_policy(DOC)
    assert policy.categories["read"].lease
    assert (policy.categories["read"].lease_max, policy.categories["read"].lease_seconds) == (
        10,
        30,
    )
    assert not policy.categories["write"].lease
    assert not policy.categories["lookup"].lease
    default = load_policy("default.json").categories
    assert default["read"].lease and not default["write"].lease


def test_a_category_may_lease_with_its_own_size_and_time() -> None:
    doc = copy.deepcopy(DOC)
    doc["categories"]["lookup"].update({"lease": True, "lease_max": 5, "lease_seconds": 10})
    doc["categories"]["read"]["lease"] = False
    policy = parse_policy(doc)
    assert (policy.categories["lookup"].lease_max, policy.categories["lookup"].lease_seconds) == (
        5,
        10,
    )
    assert not policy.categories["read"].lease


@pytest.mark.parametrize(
    ("category", "settings", "message"),
    [
        ("write", {"lease": True}, "'write': lease must not be true"),
        ("admin", {"lease": True}, "'admin': lease must not be true: it has the smallest"),
        ("read", {"lease": "yes"}, "lease must be true or false"),
        ("read", {"lease_max": 0}, "lease_max must be from 1 to the limit"),
        ("read", {"lease_max": 101}, "at most 100"),
        ("lookup", {"lease": True, "lease_max": 51}, "lease_max must be from 1 to the limit"),
        ("read", {"lease_seconds": 0}, "lease_seconds must be an integer from 1 to 300"),
        ("read", {"lease_seconds": 301}, "lease_seconds must be an integer from 1 to 300"),
    ],
)
def test_lease_settings_are_checked_at_start_up(
    category: str, settings: dict[str, Any], message: str
) -> None:
    doc = copy.deepcopy(DOC)
    doc["categories"][category].update(settings)
    with pytest.raises(ConfigurationError, match=message):
        parse_policy(doc)
