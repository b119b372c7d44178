"""Issue 28, class 1: the store's own retry is not a client's retry. A session write that
DynamoDB applied but whose answer was lost is sent again by botocore; that retry fails its
condition on the call's own id. The check must know it as its own attempt and go on to
the principal and tenant budgets, not answer it as a duplicate (which counted nothing
above the session: 5 of 5 calls allowed, principal and tenant at 0)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from typing import Any, cast

import pytest
from botocore.config import Config
from moto.server import ThreadedMotoServer

from chalicelib.aws import CLIENT_CONFIG
from chalicelib.check.requests import CheckRequest
from chalicelib.check.service import CheckService
from chalicelib.check.shards import ShardHints, shard_key, summed
from chalicelib.check.steps import GiveBack, Step
from chalicelib.clock import system_clock
from chalicelib.quota.answers import Allowed
from chalicelib.quota.core import BudgetKey, Scope, SessionKey, Spend
from chalicelib.quota.policy import WindowLimit, parse_policy
from chalicelib.storage.dynamodb.budgets import BudgetStore
from chalicelib.storage.dynamodb.counters import CounterStore
from chalicelib.storage.dynamodb.layout import UNCOUNTED
from chalicelib.storage.ports import SessionCounters, StorageError, Taken, WriteUncertain
from tests.integration.lossy import endpoint, lossy_proxy
from tests.support import (
    FixedClock,
    Stores,
    client_for,
    free_port,
    fresh_settings,
    issue28_policy,
    provisioned,
)

POLICY = parse_policy(issue28_policy())
NO_RETRIES = Config(retries={"total_max_attempts": 1, "mode": "standard"})


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


# Every write of a check to its session's item: what a lost answer makes the SDK send again.
SESSION_WRITES = (
    "consume",
    "reset_expired",
    "restart_suspended",
    "record_block",
    "admit",
    "record_replay",
    "uncount",
    "return_lease",
)


class SentTwice:
    """A session store whose every check write is applied, and then applied again as the
    SDK sends a request whose answer was lost: the caller gets the second answer. On
    each adapter, what botocore's retry is to DynamoDB."""

    def __init__(self, inner: SessionCounters) -> None:
        self._inner = inner

    def __getattr__(self, name: str) -> Any:
        target = getattr(self._inner, name)
        if name not in SESSION_WRITES:
            return target

        def twice(*args: Any, **kwargs: Any) -> Any:
            target(*args, **kwargs)
            return target(*args, **kwargs)

        return twice


def test_every_session_write_sent_again_counts_each_call_once_at_every_scope(
    stores: Stores, clock: FixedClock
) -> None:
    """Issue 28, class 1, on every adapter: a write the store applied and the SDK sent
    again is this check's own. Memory's admission answered the second sending "changed"
    (the DynamoDB adapter knows its own write), and the check answered 503."""
    lossy = cast("SessionCounters", SentTwice(stores.counters))
    service = CheckService(POLICY, lossy, clock, 3600, budgets=stores.budgets)
    decisions = [
        service.check("demo", CheckRequest("s1", "delete_tag", principal="alice", call_id=f"c{i}"))
        for i in range(5)
    ]
    assert [(type(d).__name__, getattr(d, "duplicate", None)) for d in decisions] == [
        ("Allowed", False)
    ] * 5
    retry = service.check("demo", CheckRequest("s1", "delete_tag", principal="alice", call_id="c4"))
    assert isinstance(retry, Allowed) and retry.duplicate
    principal = stores.budgets.get(BudgetKey.principal("demo", "alice"))
    assert principal is not None
    assert sum(sum(c.values()) for c in principal.counts.values()) == 5
    session = stores.counters.get(SessionKey("demo", "s1"))
    assert session is not None and session.counts.get("write") == 5


def first_take_back() -> Callable[[str, dict[str, object]], bool]:
    """The first write that takes a counted call back (it records it as `UNCOUNTED`)."""
    chosen: list[bytes] = []

    def choose(target: str, body: dict[str, object]) -> bool:
        values = json.dumps(body.get("ExpressionAttributeValues", {}), sort_keys=True)
        if not target.endswith(".UpdateItem") or f'"{UNCOUNTED}' not in values:
            return False
        chosen.append(values.encode())
        return chosen[0] == values.encode()

    return choose


def test_a_take_back_whose_answer_was_lost_takes_the_call_back_once(store_url: str) -> None:
    """Issue 28, class 1 (found by the model test): a call counted in its session and
    refused by its principal's budget is taken back; if the store applied that write and
    its answer was lost, botocore's retry takes one more call off the session's count,
    which then admits a call over its limit."""
    settings = provisioned(client_for(store_url), fresh_settings(f"l{uuid.uuid4().hex[:8]}"))
    with lossy_proxy(store_url, first_take_back()) as proxy:
        client = client_for(endpoint(proxy), base=CLIENT_CONFIG)
        counters = CounterStore(client, settings.counters_table, POLICY.categories)
        budgets = BudgetStore(client, settings.counters_table)
        service = CheckService(POLICY, counters, system_clock, 3600, budgets=budgets)
        for i in range(8):  # the principal's 8 writes: 5 in s0, 3 in s1
            call = CheckRequest(f"s{i // 5}", "delete_tag", principal="alice", call_id=f"c{i}")
            assert isinstance(service.check("demo", call), Allowed)
        over = CheckRequest("s1", "delete_tag", principal="alice", call_id="c8")
        assert not isinstance(service.check("demo", over), Allowed)
        assert proxy.lost == 1
    session = counters.get(service.attempt_for("demo", CheckRequest("s1", "x")).session)
    assert session is not None and session.counts.get("write") == 3


def test_a_refused_call_s_id_used_again_is_counted_once_when_sent_again(
    stores: Stores, clock: FixedClock
) -> None:
    """Issue 28, class 1 (found by the model test): the id of a refused call is free for
    another call; on memory that call was counted under the service's own check id only
    until recorded, so the store's second sending of its write counted it twice."""
    lossy = cast("SessionCounters", SentTwice(stores.counters))
    service = CheckService(POLICY, lossy, clock, 3600, budgets=stores.budgets)
    for i in range(6):  # the session's 5 writes, then a refused one
        service.check("demo", CheckRequest("s1", "delete_tag", principal="alice", call_id=f"c{i}"))
    again = service.check(
        "demo", CheckRequest("s1", "search", category="read", principal="alice", call_id="c5")
    )
    assert isinstance(again, Allowed) and not again.duplicate
    session = stores.counters.get(SessionKey("demo", "s1"))
    assert session is not None and session.counts == {"write": 5, "read": 1}


def budget_writes(target: str, body: dict[str, object]) -> bool:
    """Every write to a principal's or the tenant's item (their keys hold a space)."""
    key = body.get("Key")
    pk = key.get("pk", {}) if isinstance(key, dict) else {}
    return target.endswith(".UpdateItem") and " " in str(pk.get("S", ""))


def test_a_budget_write_whose_answer_was_lost_counts_once(store_url: str) -> None:
    """The store's own retry is not a second call, above the session too. A principal's
    or tenant's write that DynamoDB applied, whose answer was lost, is sent again by
    botocore: a take counted the call twice (8 allowed calls, the principal at 14), and
    a refusal's streak, and the give-back of what a refused call took, went twice: an
    over-count that refuses calls the budget has room for, or suspends early."""
    settings = provisioned(client_for(store_url), fresh_settings(f"l{uuid.uuid4().hex[:8]}"))
    with lossy_proxy(store_url, budget_writes) as proxy:
        client = client_for(endpoint(proxy), base=CLIENT_CONFIG)
        counters = CounterStore(client, settings.counters_table, POLICY.categories)
        budgets = BudgetStore(client, settings.counters_table)
        service = CheckService(POLICY, counters, system_clock, 3600, budgets=budgets)
        decisions = [
            service.check(
                "demo",
                CheckRequest(f"s{i // 5}", "delete_tag", principal="alice", call_id=f"c{i}"),
            )
            for i in range(10)
        ]
        assert proxy.lost >= 4
    # The principal's 8 a day stop the 9th and 10th (what the tenant took goes back).
    assert [type(d).__name__ for d in decisions] == ["Allowed"] * 8 + ["Refused"] * 2
    principal = budgets.get(BudgetKey.principal("demo", "alice"))
    shards = range(16)  # the default split of this tenant limit (1000)
    tenant = summed([budgets.get(shard_key(BudgetKey.whole_tenant("demo"), i)) for i in shards])
    assert principal is not None and tenant is not None
    assert sum(sum(c.values()) for c in principal.counts.values()) == 8
    assert sum(sum(c.values()) for c in tenant.counts.values()) == 8
    assert principal.streak("write") == 2


def every_seventh_budget_write() -> Callable[[str, dict[str, object]], bool]:
    """Every seventh write to a principal's or the tenant's item: a take, a give-back."""
    seen = iter(range(1_000_000))

    def choose(target: str, body: dict[str, object]) -> bool:
        return budget_writes(target, body) and next(seen) % 7 == 0

    return choose


def test_a_budget_write_with_no_answer_at_all_counts_only_allowed_calls(store_url: str) -> None:
    """A write whose answer never came, and that no client retry sent again (a timeout):
    the store may have applied it. A take like that was never given back when the check
    answered 503 (the frozen store's principal at 3 for 2 allowed calls); a give-back
    like that, tried again, gave back twice (over-admission). Each budget counts exactly
    the calls allowed, whatever the client retries with the same call id."""
    settings = provisioned(client_for(store_url), fresh_settings(f"l{uuid.uuid4().hex[:8]}"))
    with lossy_proxy(store_url, every_seventh_budget_write()) as proxy:
        client = client_for(endpoint(proxy), base=CLIENT_CONFIG.merge(NO_RETRIES))
        counters = CounterStore(client, settings.counters_table, POLICY.categories)
        budgets = BudgetStore(client, settings.counters_table)
        service = CheckService(POLICY, counters, system_clock, 3600, budgets=budgets)
        answers = []
        for i in range(12):
            request = CheckRequest(f"s{i // 4}", "delete_tag", principal="alice", call_id=f"c{i}")
            for _ in range(6):  # the client retries a 503 with the same call id
                try:
                    answers.append(service.check("demo", request))
                    break
                except StorageError:
                    continue
        assert proxy.lost >= 4
    allowed = [a for a in answers if isinstance(a, Allowed) and not a.duplicate]
    principal = budgets.get(BudgetKey.principal("demo", "alice"))
    shards = range(16)  # the default split of this tenant limit (1000)
    tenant = summed([budgets.get(shard_key(BudgetKey.whole_tenant("demo"), i)) for i in shards])
    assert principal is not None and tenant is not None
    assert len(allowed) == 8  # the principal's 8 a day, none lost to a miscount
    assert sum(sum(c.values()) for c in principal.counts.values()) == 8
    assert sum(sum(c.values()) for c in tenant.counts.values()) == 8


def first_give_back() -> Callable[[str, dict[str, object]], bool]:
    """The first give-back to a budget (its change adds a negative count)."""
    lost: list[bool] = []

    def choose(target: str, body: dict[str, object]) -> bool:
        values = body.get("ExpressionAttributeValues")
        negative = isinstance(values, dict) and any(
            str(v.get("N", "")).startswith("-") for v in values.values() if isinstance(v, dict)
        )
        if lost or not (budget_writes(target, body) and negative):
            return False
        lost.append(True)
        return True

    return choose


def test_a_give_back_with_no_answer_tried_again_gives_back_once(store_url: str) -> None:
    """A give-back whose answer never came, tried again by the check (over a throttle,
    or by the session's next check), was a second give-back when the store had applied
    the first: the budget then counted one call fewer than it allowed (over-admission)."""
    settings = provisioned(client_for(store_url), fresh_settings(f"l{uuid.uuid4().hex[:8]}"))
    with lossy_proxy(store_url, first_give_back()) as proxy:
        client = client_for(endpoint(proxy), base=CLIENT_CONFIG.merge(NO_RETRIES))
        budgets = BudgetStore(client, settings.counters_table)
        window = WindowLimit(Scope.PRINCIPAL, 8, 86_400)
        now = system_clock()
        spend = Spend("write", 8, window.window_start_ms(now), window.window_end_ms(now), now)
        key = BudgetKey.principal("demo", "alice")
        assert isinstance(budgets.take(key, spend), Taken)
        assert isinstance(budgets.take(key, spend), Taken)
        undo = GiveBack(budgets, ShardHints(), [Step(key, window, spend)])
        with pytest.raises(WriteUncertain):
            undo()  # applied, its answer lost
        undo()  # tried again: the store knows it applied it
        undo()  # nothing is left to give back
        assert proxy.lost == 1
    principal = budgets.get(key)
    assert principal is not None and principal.used("write", spend.window_start_ms) == 1
