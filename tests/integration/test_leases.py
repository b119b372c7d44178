"""Leased reads on every backend (memory, moto, dynalite), through `CheckService` and the
ports: a lease counts all its calls in one check, the end of a budget grants what
remains, unspent calls come back once and only to the counters that granted them; and,
on dynalite (atomic per item, like DynamoDB) and memory, concurrent leases never admit
more than the limit in total."""

from __future__ import annotations

import json
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any

import pytest

from chalicelib.check.requests import CheckRequest, LeaseReturn
from chalicelib.check.service import CheckService
from chalicelib.clock import system_clock
from chalicelib.quota.answers import Allowed, Decision, Refused
from chalicelib.quota.core import BudgetKey, Lease, LeaseId, SessionKey
from chalicelib.quota.policy import POLICY_DIR, Policy, parse_policy
from chalicelib.storage.dynamodb.budgets import BudgetStore
from chalicelib.storage.dynamodb.counters import CounterStore
from chalicelib.storage.memory.records import MemoryBudgets, MemoryCounters
from chalicelib.storage.ports import BudgetCounters, LimitChange, SessionCounters
from tests.support import FixedClock, Stores, client_for, fresh_settings, provisioned

IDLE = 3600
READS = 30
PRINCIPAL_READS = 45


def _policy(principal: bool = False) -> Policy:
    document = json.loads((POLICY_DIR / "default.json").read_text())
    document["categories"]["read"]["limit"] = READS
    if principal:
        document["categories"]["read"]["principal"] = {"limit": PRINCIPAL_READS, "window": "24h"}
    return parse_policy(document)


POLICY = _policy()
WIDER = _policy(principal=True)
S1 = SessionKey("demo", "s1")


def service(stores: Stores, clock: FixedClock, policy: Policy = POLICY) -> CheckService:
    return CheckService(policy, stores.counters, clock, IDLE, budgets=stores.budgets)


def read(lease: int | None, session: str = "s1", **kw: Any) -> CheckRequest:
    return CheckRequest(session_id=session, tool="search_articles", lease=lease, **kw)


def granted(decision: Decision) -> Lease:
    assert isinstance(decision, Allowed), decision
    assert decision.lease is not None, decision
    return decision.lease


def back(lease: Lease, unused: int, session: str = "s1") -> LeaseReturn:
    parsed = LeaseId.parse(lease.lease_id)
    assert parsed is not None
    return LeaseReturn(session, parsed, unused)


def counted(stores: Stores, session: SessionKey = S1) -> tuple[int, int]:
    snapshot = stores.counters.get(session)
    assert snapshot is not None
    return snapshot.counts.get("read", 0), snapshot.leased.get("read", 0)


def test_a_lease_counts_all_its_calls_in_one_check(stores: Stores, clock: FixedClock) -> None:
    checks = service(stores, clock)
    first = granted(checks.check("demo", read(5)))
    assert first.granted == 5 and first.lease_max == 10 and first.lease_seconds == 30
    decision = checks.check("demo", read(4))
    assert granted(decision).granted == 4 and decision.used == 9
    assert counted(stores) == (9, 9)
    assert len(stores.counters.get(S1).calls) == 2  # type: ignore[union-attr]


def test_a_lease_is_capped_at_lease_max_and_a_plain_check_is_not_leased(
    stores: Stores, clock: FixedClock
) -> None:
    checks = service(stores, clock)
    assert granted(checks.check("demo", read(100))).granted == 10
    plain = checks.check("demo", read(None))
    assert isinstance(plain, Allowed) and plain.lease is None and plain.used == 11
    assert counted(stores) == (11, 10)


def test_writes_never_lease_the_field_is_ignored(stores: Stores, clock: FixedClock) -> None:
    checks = service(stores, clock)
    decision = checks.check("demo", CheckRequest("s1", "delete_tag", lease=10))
    assert isinstance(decision, Allowed) and decision.lease is None and decision.used == 1


def test_the_end_of_a_budget_grants_what_remains_then_refuses(
    stores: Stores, clock: FixedClock
) -> None:
    checks = service(stores, clock)
    for size in (10, 10, 7):
        assert granted(checks.check("demo", read(size))).granted == size
    last = checks.check("demo", read(10))
    assert granted(last).granted == 3 and last.used == READS
    refused = checks.check("demo", read(10))
    assert isinstance(refused, Refused) and refused.used == READS and refused.limit == READS
    assert counted(stores) == (READS, READS)


def test_a_raise_in_force_lifts_the_limit_of_a_lease(stores: Stores, clock: FixedClock) -> None:
    checks = service(stores, clock)
    for _ in range(3):
        checks.check("demo", read(10))
    assert isinstance(checks.check("demo", read(10)), Refused)
    stores.counters.raise_limit(
        S1, LimitChange("read", 45, clock(), IDLE * 1000), stores.counters.get(S1)
    )
    assert granted(checks.check("demo", read(10))).granted == 10
    last = checks.check("demo", read(10))
    assert granted(last).granted == 5 and last.used == 45
    assert isinstance(checks.check("demo", read(2)), Refused)


def test_unspent_calls_come_back_once(stores: Stores, clock: FixedClock) -> None:
    checks = service(stores, clock)
    lease = granted(checks.check("demo", read(10)))
    assert checks.return_lease("demo", back(lease, 7)) == 7
    assert counted(stores) == (3, 3)
    assert checks.return_lease("demo", back(lease, 7)) == 0  # a retried return
    assert counted(stores) == (3, 3)
    assert granted(checks.check("demo", read(10))).granted == 10
    assert counted(stores) == (13, 13)


def test_only_the_last_lease_granted_comes_back_exactly_as_granted_once(
    stores: Stores, clock: FixedClock
) -> None:
    checks = service(stores, clock)
    first = granted(checks.check("demo", read(5)))
    second = granted(checks.check("demo", read(5)))
    # The session keeps the last lease it granted in the category: an older one, or any
    # id altered to claim more calls or another time, gives nothing back.
    assert checks.return_lease("demo", back(first, 4)) == 0
    assert checks.return_lease("demo", back(replace(second, granted=10), 9)) == 0
    assert checks.return_lease("demo", back(replace(second, granted_ms=clock() - 1), 4)) == 0
    assert checks.return_lease("demo", back(second, 4)) == 4
    assert checks.return_lease("demo", back(second, 4)) == 0  # once
    assert counted(stores) == (6, 6)


def test_a_return_never_takes_back_more_than_the_leases_counted(
    stores: Stores, clock: FixedClock
) -> None:
    checks = service(stores, clock)
    lease = granted(checks.check("demo", read(4)))
    checks.check("demo", read(None))  # counted alone, not leased
    other = SessionKey("demo", "s2")
    assert checks.return_lease("demo", back(lease, 4, "s2")) == 0  # not that session's
    assert checks.return_lease("demo", back(lease, 4)) == 4
    assert counted(stores) == (1, 0)
    assert stores.counters.get(other) is None


def test_a_return_after_a_reset_or_an_idle_restart_is_ignored(
    stores: Stores, clock: FixedClock
) -> None:
    checks = service(stores, clock)
    lease = granted(checks.check("demo", read(10)))
    clock.advance(1)
    stores.counters.reset(S1, clock(), IDLE * 1000)
    checks.check("demo", read(2))
    assert checks.return_lease("demo", back(lease, 9)) == 0
    assert counted(stores) == (2, 2)
    lease = granted(checks.check("demo", read(3)))
    clock.advance(IDLE + 1)
    checks.check("demo", read(2))  # the counters start again
    assert checks.return_lease("demo", back(lease, 2)) == 0
    assert counted(stores) == (2, 2)


def test_a_lease_takes_all_its_calls_from_a_wider_budget_and_gives_them_back(
    stores: Stores, clock: FixedClock
) -> None:
    checks = service(stores, clock, WIDER)
    bot = BudgetKey.principal("demo", "bot")
    lease = granted(checks.check("demo", read(10, principal="bot")))
    decision = checks.check("demo", read(10, "s2", principal="bot"))
    assert granted(decision).granted == 10
    assert [use.used for use in decision.scopes] == [20]
    assert checks.return_lease("demo", back(lease, 6)) == 6
    snapshot = stores.budgets.get(bot)
    assert snapshot is not None
    assert sum(snapshot.counts[start]["read"] for start in snapshot.counts) == 14


def test_a_returned_lease_is_credited_to_the_principal_it_was_charged_to(
    stores: Stores, clock: FixedClock
) -> None:
    """Defect class: what the client reports is trusted. A lease's unused calls went back
    to the session's latest principal, not the one charged (P2 got 39 reads against a
    limit of 30): the lease id binds its principal, checked against the session's grant."""
    checks = service(stores, clock, WIDER)
    lease = granted(checks.check("demo", read(10, principal="alice")))
    assert checks.check("demo", read(None, principal="bob")).allowed  # the latest principal
    assert checks.return_lease("demo", back(lease, 6)) == 6

    def used(principal: str) -> int:
        snapshot = stores.budgets.get(BudgetKey.principal("demo", principal))
        assert snapshot is not None
        return sum(counts.get("read", 0) for counts in snapshot.counts.values())

    assert (used("alice"), used("bob")) == (4, 1)


def test_a_lease_id_naming_another_principal_gives_nothing_back(
    stores: Stores, clock: FixedClock
) -> None:
    """Defect class: what the client reports is trusted. A lease id altered to name
    another principal matches no grant of the session: nothing goes back anywhere."""
    checks = service(stores, clock, WIDER)
    lease = granted(checks.check("demo", read(10, principal="alice")))
    forged = replace(lease, principal="bob")
    assert checks.return_lease("demo", back(forged, 6)) == 0
    assert counted(stores) == (10, 10)


def test_a_partial_grant_takes_only_what_it_granted_from_a_wider_budget(
    stores: Stores, clock: FixedClock
) -> None:
    checks = service(stores, clock, WIDER)
    for size in (10, 10, 7):
        granted(checks.check("demo", read(size, principal="bot")))
    last = checks.check("demo", read(10, principal="bot"))
    assert granted(last).granted == 3
    assert [use.used for use in last.scopes] == [READS]
    assert checks.return_lease("demo", back(granted(last), 3)) == 3
    snapshot = stores.budgets.get(BudgetKey.principal("demo", "bot"))
    assert snapshot is not None
    assert sum(counts["read"] for counts in snapshot.counts.values()) == READS - 3


def test_a_lease_bigger_than_a_wider_budget_has_left_gets_what_remains(
    stores: Stores, clock: FixedClock
) -> None:
    checks = service(stores, clock, WIDER)
    bot = BudgetKey.principal("demo", "bot")
    for size in (10, 10, 10):
        granted(checks.check("demo", read(size, "s1", principal="bot")))
    granted(checks.check("demo", read(10, "s2", principal="bot")))  # 40 of 45
    assert granted(checks.check("demo", read(10, "s2", principal="bot"))).granted == 5
    assert counted(stores, SessionKey("demo", "s2")) == (15, 15)
    before = stores.budgets.get(bot)
    refused = checks.check("demo", read(10, "s3", principal="bot"))
    assert isinstance(refused, Refused) and refused.scope.value == "principal"
    assert refused.used == PRINCIPAL_READS
    assert stores.budgets.get(bot) is not None
    assert stores.budgets.get(bot).counts == before.counts  # type: ignore[union-attr]
    assert counted(stores, SessionKey("demo", "s3")) == (0, 0)


# -- concurrency: dynalite (atomic per item, like DynamoDB) and memory ------------------

CLIENTS = 32


@pytest.fixture(scope="module", params=["memory", "dynalite"])
def atomic(request: pytest.FixtureRequest) -> tuple[SessionCounters, BudgetCounters]:
    categories = tuple(POLICY.categories)
    if request.param == "memory":
        return MemoryCounters(categories), MemoryBudgets()
    endpoint = request.getfixturevalue("dynalite_endpoint")
    client = client_for(endpoint, pool=CLIENTS + 8)
    settings = provisioned(client, fresh_settings(f"l{uuid.uuid4().hex[:8]}"))
    table = settings.counters_table
    return CounterStore(client, table, categories), BudgetStore(client, table)


def burst(checks: CheckService, requests: list[CheckRequest]) -> list[Decision]:
    barrier = threading.Barrier(len(requests))

    def one(request: CheckRequest) -> Decision:
        barrier.wait()
        return checks.check("demo", request)

    with ThreadPoolExecutor(len(requests)) as pool:
        return list(pool.map(one, requests))


def total(decisions: list[Decision]) -> int:
    return sum(d.lease.granted if d.lease else 1 for d in decisions if isinstance(d, Allowed))


@pytest.mark.parametrize("round_", range(4))
def test_concurrent_leases_never_admit_more_than_the_limit(
    atomic: tuple[SessionCounters, BudgetCounters], round_: int
) -> None:
    counters, budgets = atomic
    checks = CheckService(POLICY, counters, system_clock, IDLE, budgets=budgets)
    session = f"burst-{round_}-{uuid.uuid4().hex[:6]}"
    decisions = burst(checks, [read(1 + (i + round_) % 10, session) for i in range(CLIENTS)])
    assert total(decisions) == READS
    snapshot = counters.get(SessionKey("demo", session))
    assert snapshot is not None and snapshot.counts["read"] == READS


def test_concurrent_leases_under_a_raise_never_admit_more_than_the_raise(
    atomic: tuple[SessionCounters, BudgetCounters],
) -> None:
    counters, budgets = atomic
    checks = CheckService(POLICY, counters, system_clock, IDLE, budgets=budgets)
    key = SessionKey("demo", f"raised-{uuid.uuid4().hex[:6]}")
    checks.check("demo", read(None, key.session_id))
    change = LimitChange("read", 70, system_clock(), IDLE * 1000)
    counters.raise_limit(key, change, counters.get(key))
    decisions = burst(checks, [read(7, key.session_id) for _ in range(CLIENTS)])
    assert total(decisions) + 1 <= 70
    snapshot = counters.get(key)
    assert snapshot is not None and snapshot.counts["read"] == total(decisions) + 1 == 70


def test_concurrent_leases_of_one_principal_never_pass_its_budget(
    atomic: tuple[SessionCounters, BudgetCounters],
) -> None:
    counters, budgets = atomic
    checks = CheckService(WIDER, counters, system_clock, IDLE, budgets=budgets)
    principal = f"bot-{uuid.uuid4().hex[:6]}"
    requests = [read(7, f"{principal}-{i % 8}", principal=principal) for i in range(CLIENTS)]
    decisions = burst(checks, requests)
    snapshot = budgets.get(BudgetKey.principal("demo", principal))
    assert snapshot is not None
    used = sum(counts.get("read", 0) for counts in snapshot.counts.values())
    assert used == total(decisions) <= PRINCIPAL_READS
