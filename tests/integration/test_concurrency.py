"""Atomicity under concurrency, on dynalite (atomic per item like DynamoDB; moto is not)."""

from __future__ import annotations

import threading
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest

from chalicelib.clock import system_clock
from chalicelib.policy import load_policy
from chalicelib.quota import Decision
from chalicelib.service import CheckService
from chalicelib.storage.counters import CounterStore
from chalicelib.validation import CheckRequest
from tests.support import client_for, fresh_settings, provisioned

CLIENTS = 64
ROUNDS = 10


@pytest.fixture(scope="module")
def service(dynalite_endpoint: str) -> CheckService:
    client = client_for(dynalite_endpoint, pool=CLIENTS + 4)
    settings = provisioned(client, fresh_settings(f"c{uuid.uuid4().hex[:8]}"))
    store = CounterStore(client, settings.counters_table)
    return CheckService(load_policy("default.json"), store, system_clock, 3600)


def burst(service: CheckService, session: str, call_ids: bool = False) -> list[Decision]:
    barrier = threading.Barrier(CLIENTS)

    def one(i: int) -> Decision:
        barrier.wait()
        call_id = f"call-{i}" if call_ids else None
        return service.check("demo", CheckRequest(session, "delete_tag", call_id=call_id))

    with ThreadPoolExecutor(CLIENTS) as pool:
        return list(pool.map(one, range(CLIENTS)))


@pytest.mark.parametrize("round_", range(ROUNDS))
def test_64_concurrent_clients_get_exactly_the_write_limit(
    service: CheckService, round_: int
) -> None:
    decisions = burst(service, f"burst-{round_}-{uuid.uuid4().hex[:6]}", call_ids=round_ % 2 == 1)
    allowed = [d for d in decisions if d.allowed]
    assert len(allowed) == 15
    assert sorted(d.used for d in allowed) == list(range(1, 16))
    refused = [d for d in decisions if not d.allowed]
    assert all(d.used == 15 for d in refused)
    assert sum(d.first_exhaustion for d in refused) == 1
