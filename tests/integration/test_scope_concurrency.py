"""Issue 11, item 3, on dynalite (atomic per item like DynamoDB; moto is not): one check
counts against every scope, all or nothing, and no scope is ever over-admitted. 8
sessions of one principal, 16 concurrent clients each, 128 at once: with a session limit
of 15 and a principal limit of 100, exactly 100 are allowed, in each of 20 runs."""

from __future__ import annotations

import threading
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest

from chalicelib.check.requests import CheckRequest
from chalicelib.check.service import CheckService
from chalicelib.clock import system_clock
from chalicelib.quota.answers import Decision, Refused
from chalicelib.quota.core import BudgetKey, Scope
from chalicelib.quota.policy import parse_policy
from chalicelib.storage.dynamodb.budgets import BudgetStore
from chalicelib.storage.dynamodb.counters import CounterStore
from tests.support import client_for, fresh_settings, provisioned

SESSIONS = 8
CLIENTS_PER_SESSION = 16
RUNS = 20
POLICY = parse_policy(
    {
        "version": 1,
        "categories": {
            "read": {"limit": 200},
            "write": {
                "limit": 15,
                "principal": {"limit": 100, "window": "24h"},
                "tenant": {"limit": 100_000, "window": "1h"},
            },
        },
        "suspend_after_refusals": 1000,
    }
)


@pytest.fixture(scope="module")
def stores(dynalite_endpoint: str) -> tuple[CounterStore, BudgetStore]:
    clients = SESSIONS * CLIENTS_PER_SESSION
    client = client_for(dynalite_endpoint, pool=clients + 8)
    settings = provisioned(client, fresh_settings(f"x{uuid.uuid4().hex[:8]}"))
    counters = CounterStore(client, settings.counters_table, POLICY.categories)
    return counters, BudgetStore(client, settings.counters_table)


@pytest.mark.parametrize("run", range(RUNS))
def test_128_clients_on_8_sessions_of_one_principal_get_exactly_the_principal_limit(
    stores: tuple[CounterStore, BudgetStore], run: int
) -> None:
    counters, budgets = stores
    service = CheckService(POLICY, counters, system_clock, 3600, budgets=budgets)
    principal = f"bot-{run}-{uuid.uuid4().hex[:6]}"
    clients = SESSIONS * CLIENTS_PER_SESSION
    barrier = threading.Barrier(clients)

    def one(i: int) -> Decision:
        request = CheckRequest(f"{principal}-s{i % SESSIONS}", "delete_tag", principal=principal)
        barrier.wait()
        return service.check("demo", request)

    with ThreadPoolExecutor(clients) as pool:
        decisions = list(pool.map(one, range(clients)))
    allowed = [d for d in decisions if d.allowed]
    assert len(allowed) == 100
    refused = [d for d in decisions if isinstance(d, Refused)]
    assert {d.scope for d in refused} <= {Scope.SESSION, Scope.PRINCIPAL}
    # Every scope's counter agrees with what was allowed: nothing over, nothing lost.
    snapshot = budgets.get(BudgetKey.principal("demo", principal))
    assert snapshot is not None
    assert sum(sum(c.values()) for c in snapshot.counts.values()) == 100
    per_session = [
        counters.get(service.attempt_for("demo", CheckRequest(f"{principal}-s{s}", "x")).session)
        for s in range(SESSIONS)
    ]
    counted = [p.counts.get("write", 0) for p in per_session if p is not None]
    assert sum(counted) == 100 and max(counted) <= 15
