"""Issue 28, class 1: the store's own retry is not a client's retry. A session write that
DynamoDB applied but whose answer was lost is sent again by botocore; that retry fails its
condition on the call's own id. The check must know it as its own attempt and go on to
the principal and tenant budgets, not answer it as a duplicate (which counted nothing
above the session: 5 of 5 calls allowed, principal and tenant at 0)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from moto.server import ThreadedMotoServer

from chalicelib.check.requests import CheckRequest
from chalicelib.check.service import CheckService
from chalicelib.check.shards import shard_key, summed
from chalicelib.clock import system_clock
from chalicelib.quota.answers import Allowed
from chalicelib.quota.core import BudgetKey
from chalicelib.quota.policy import parse_policy
from chalicelib.storage.dynamodb.budgets import BudgetStore
from chalicelib.storage.dynamodb.counters import CounterStore
from chalicelib.wiring import CLIENT_CONFIG
from tests.integration.lossy import endpoint, lossy_proxy
from tests.support import client_for, free_port, fresh_settings, provisioned

POLICY = parse_policy(
    {
        "version": 1,
        "categories": {
            "read": {"limit": 200},
            "write": {
                "limit": 5,
                "principal": {"limit": 8, "window": "24h"},
                "tenant": {"limit": 1000, "window": "1h"},
            },
        },
        "suspend_after_refusals": 10,
    }
)


@pytest.fixture(params=["moto", "dynalite"])
def store_url(request: pytest.FixtureRequest) -> Iterator[str]:
    """A real DynamoDB server over HTTP: moto's, or dynalite."""
    if request.param == "dynalite":
        yield request.getfixturevalue("dynalite_endpoint")
        return
    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.stop()


def test_a_write_applied_whose_answer_was_lost_is_counted_at_every_scope(store_url: str) -> None:
    settings = provisioned(client_for(store_url), fresh_settings(f"l{uuid.uuid4().hex[:8]}"))
    with lossy_proxy(store_url) as proxy:
        # The service's own client settings: botocore retries a lost answer once.
        client = client_for(endpoint(proxy), base=CLIENT_CONFIG)
        counters = CounterStore(client, settings.counters_table, POLICY.categories)
        budgets = BudgetStore(client, settings.counters_table)
        service = CheckService(POLICY, counters, system_clock, 3600, budgets=budgets)
        decisions = [
            service.check(
                "demo",
                CheckRequest("s1", "delete_tag", principal="alice", call_id=f"call-{i}"),
            )
            for i in range(5)
        ]
        assert proxy.lost >= 5  # every session write lost its first answer
    assert all(isinstance(d, Allowed) and not d.duplicate for d in decisions)
    principal = budgets.get(BudgetKey.principal("demo", "alice"))
    shards = range(16)  # the default split of this tenant limit (1000)
    tenant = summed([budgets.get(shard_key(BudgetKey.whole_tenant("demo"), i)) for i in shards])
    assert principal is not None and tenant is not None
    assert sum(sum(c.values()) for c in principal.counts.values()) == 5
    assert sum(sum(c.values()) for c in tenant.counts.values()) == 5
    session = counters.get(service.attempt_for("demo", CheckRequest("s1", "x")).session)
    assert session is not None and session.counts.get("write") == 5
