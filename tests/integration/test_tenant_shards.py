"""Issue 33, item 4, on dynalite (atomic per item like DynamoDB; moto is not): the
tenant's ceiling is split over shards, so its hottest item no longer takes every write
(DynamoDB serves about 1,000 writes a second per partition), and the tenant is never
over-admitted. With a tenant limit of 60 and 8 concurrent clients calling well past it,
54 to 60 calls are allowed, never more, and the hottest tenant item takes at most one
UpdateItem per 3 calls allowed (refusals at a spent tenant write no tenant item)."""

from __future__ import annotations

import threading
import uuid
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from chalicelib.check.requests import CheckRequest
from chalicelib.check.service import CheckService
from chalicelib.check.shards import shard_key
from chalicelib.clock import system_clock
from chalicelib.quota.answers import Refused
from chalicelib.quota.core import BudgetKey, Scope
from chalicelib.quota.policy import parse_policy
from chalicelib.storage.dynamodb.budgets import BudgetStore
from chalicelib.storage.dynamodb.counters import CounterStore
from tests.support import client_for, fresh_settings, provisioned

pytestmark = pytest.mark.dynalite

CLIENTS = 8
CALLS_EACH = 20  # 160 calls for a limit of 60: most of them meet a spent tenant
TENANT_LIMIT = 60
RUNS = 5
POLICY = parse_policy(
    {
        "version": 1,
        "categories": {
            "read": {"limit": 200},
            "write": {"limit": 60, "tenant": {"limit": TENANT_LIMIT, "window": "1h"}},
        },
        "suspend_after_refusals": 1000,
    }
)
SHARDS = POLICY.categories["write"].tenant.shards if POLICY.categories["write"].tenant else 1
FIGURES: list[tuple[int, int]] = []  # (allowed, writes on the hottest item), per run


class Writes:
    """UpdateItem requests per item, counted as the client sends them (a botocore hook:
    every request is counted, none is changed)."""

    def __init__(self) -> None:
        self.by_key: Counter[str] = Counter()
        self._lock = threading.Lock()

    def __call__(self, params: dict[str, Any], **_: Any) -> None:
        key = params.get("Key", {}).get("pk", {}).get("S")
        if key is not None:
            with self._lock:
                self.by_key[key] += 1

    def on_items_of(self, tenant: str) -> dict[str, int]:
        """The writes on each budget item of a tenant's ceiling."""
        return {k: n for k, n in self.by_key.items() if k.startswith(f"{tenant} tenant")}


@pytest.fixture(scope="module")
def store(dynalite_endpoint: str) -> Iterator[tuple[CounterStore, BudgetStore, Writes]]:
    client = client_for(dynalite_endpoint, pool=CLIENTS + 8)
    settings = provisioned(client, fresh_settings(f"h{uuid.uuid4().hex[:8]}"))
    writes = Writes()
    client.meta.events.register("before-parameter-build.dynamodb.UpdateItem", writes)
    counters = CounterStore(client, settings.counters_table, POLICY.categories)
    yield counters, BudgetStore(client, settings.counters_table), writes
    allowed = [a for a, _ in FIGURES]
    if allowed:
        print(  # the figures the operations page quotes
            f"\ntenant shards: {SHARDS}; allowed per run {allowed} "
            f"(min {min(allowed)}, mean {sum(allowed) / len(allowed):.1f}); "
            f"writes on the hottest item per run {[w for _, w in FIGURES]}"
        )


@pytest.mark.parametrize("run", range(RUNS))
def test_8_clients_at_a_tenant_limit_of_60_spread_its_writes_and_never_pass_it(
    store: tuple[CounterStore, BudgetStore, Writes], run: int
) -> None:
    """Defect class: a hot item (every take and every refusal of a tenant wrote one item,
    so a busy tenant hit DynamoDB's per-partition ceiling and answered 503)."""
    counters, budgets, writes = store
    service = CheckService(POLICY, counters, system_clock, 3600, budgets=budgets)
    tenant = f"t{run}-{uuid.uuid4().hex[:6]}"
    barrier = threading.Barrier(CLIENTS)

    def client(i: int) -> list[bool]:
        barrier.wait()
        return [
            service.check(tenant, CheckRequest(f"s{i}", "delete_tag")).allowed
            for _ in range(CALLS_EACH)
        ]

    with ThreadPoolExecutor(CLIENTS) as pool:
        answers = [a for each in pool.map(client, range(CLIENTS)) for a in each]
    allowed = sum(answers)
    hottest = max(writes.on_items_of(tenant).values())
    FIGURES.append((allowed, hottest))
    assert 54 <= allowed <= TENANT_LIMIT
    # A spread over 10 shards is 6 takes an item plus the failed takes contention brings
    # (7 to 13 idle, up to 16 seen beside another job); one hot item took 265.
    assert hottest * 3 <= allowed, writes.on_items_of(tenant)
    # Every shard's count agrees with what was allowed: nothing over, nothing lost.
    shards = [budgets.get(shard_key(BudgetKey.whole_tenant(tenant), i)) for i in range(SHARDS)]
    counted = [sum(sum(c.values()) for c in s.counts.values()) for s in shards if s]
    assert sum(counted) == allowed
    # And a refusal there names the tenant's ceiling.
    last = service.check(tenant, CheckRequest("late", "delete_tag"))
    assert isinstance(last, Refused) and last.scope is Scope.TENANT
