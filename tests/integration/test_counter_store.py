"""The check's storage contract, run against moto and against dynalite."""

from __future__ import annotations

import json

import pytest

from chalicelib.policy import load_policy
from chalicelib.quota import QUOTA_EXCEEDED, SESSION_SUSPENDED
from chalicelib.service import CheckService
from chalicelib.storage.counters import PK, SUSPENDED, CounterStore
from chalicelib.validation import CheckRequest
from tests.support import Backend, FixedClock

IDLE = 3600


def make_service(backend: Backend, clock: FixedClock, keep: int = 10) -> CheckService:
    store = CounterStore(backend.client, backend.settings.counters_table, keep)
    return CheckService(load_policy("default.json"), store, clock, IDLE)


def write(session: str = "s1", **kw: object) -> CheckRequest:
    return CheckRequest(session_id=session, tool="delete_tag", **kw)  # type: ignore[arg-type]


def read(session: str = "s1") -> CheckRequest:
    return CheckRequest(session_id=session, tool="search_articles")


def item(backend: Backend, key: str) -> dict[str, object]:
    response = backend.client.get_item(
        TableName=backend.settings.counters_table, Key={PK: {"S": key}}, ConsistentRead=True
    )
    return dict(response.get("Item", {}))


def test_counts_up_to_the_limit_then_refuses_without_passing_it(
    backend: Backend, clock: FixedClock
) -> None:
    service = make_service(backend, clock)
    answers = [service.check("demo", write()) for _ in range(20)]
    assert [a.allowed for a in answers] == [True] * 15 + [False] * 5
    assert [a.used for a in answers[:15]] == list(range(1, 16))
    assert all(a.used == 15 and a.limit == 15 for a in answers[15:])
    assert answers[15].reason == QUOTA_EXCEEDED
    assert item(backend, "demo#s1")["n_write"] == {"N": "15"}


def test_categories_and_sessions_and_tenants_count_separately(
    backend: Backend, clock: FixedClock
) -> None:
    service = make_service(backend, clock)
    for _ in range(15):
        assert service.check("demo", write()).allowed
    assert not service.check("demo", write()).allowed
    assert service.check("demo", read()).allowed
    assert service.check("demo", write("s2")).allowed
    assert service.check("other", write()).allowed
    reads = [service.check("demo", read()) for _ in range(199)]
    assert reads[-1].allowed and reads[-1].used == 200
    assert not service.check("demo", read()).allowed


def test_idle_expiry_resets_counters_even_if_ttl_never_deleted_the_item(
    backend: Backend, clock: FixedClock
) -> None:
    service = make_service(backend, clock)
    for _ in range(16):
        service.check("demo", write())
    assert not service.check("demo", write()).allowed
    clock.advance(IDLE - 1)  # a refused attempt restarted the idle clock
    assert not service.check("demo", write()).allowed
    clock.advance(IDLE + 1)
    again = service.check("demo", write())
    assert again.allowed and again.used == 1
    assert service.check("demo", read()).used == 1


def test_a_retry_with_the_same_call_id_is_counted_once(backend: Backend, clock: FixedClock) -> None:
    service = make_service(backend, clock)
    first = service.check("demo", write(call_id="rpc-1"))
    retry = service.check("demo", write(call_id="rpc-1"))
    other = service.check("demo", write(call_id="rpc-2"))
    assert first.allowed and not first.duplicate and first.used == 1
    assert retry.allowed and retry.duplicate and retry.used == 1
    assert other.used == 2


def test_a_refused_call_id_is_not_a_duplicate_once_the_quota_allows_it(
    backend: Backend, clock: FixedClock
) -> None:
    service = make_service(backend, clock)
    for i in range(15):
        service.check("demo", write(call_id=f"ok-{i}"))
    assert not service.check("demo", write(call_id="late")).allowed
    backend.client.update_item(
        TableName=backend.settings.counters_table,
        Key={PK: {"S": "demo#s1"}},
        UpdateExpression="SET #r = :r",
        ExpressionAttributeNames={"#r": "r_write"},
        ExpressionAttributeValues={":r": {"N": "20"}},
    )
    retried = service.check("demo", write(call_id="late"))
    assert retried.allowed and not retried.duplicate and retried.used == 16
    assert retried.limit == 20


def test_exhaustion_is_first_exactly_once(backend: Backend, clock: FixedClock) -> None:
    service = make_service(backend, clock)
    answers = [service.check("demo", write()) for _ in range(40)]
    firsts = [a for a in answers if a.first_exhaustion]
    assert len(firsts) == 1 and firsts[0] is answers[15]
    reads = [service.check("demo", read()) for _ in range(205)]
    assert [i for i, a in enumerate(reads) if a.first_exhaustion] == [200]
    assert item(backend, "demo#s1")["b_write"] == {"N": "25"}


def test_suspended_session_is_refused_explicitly(backend: Backend, clock: FixedClock) -> None:
    service = make_service(backend, clock)
    service.check("demo", read())
    backend.client.update_item(
        TableName=backend.settings.counters_table,
        Key={PK: {"S": "demo#s1"}},
        UpdateExpression="SET #s = :why REMOVE expires_at",
        ExpressionAttributeNames={"#s": SUSPENDED},
        ExpressionAttributeValues={":why": {"S": "runaway"}},
    )
    refused = service.check("demo", read())
    assert not refused.allowed and refused.reason == SESSION_SUSPENDED
    assert "suspended" in refused.message and "NOT run" in refused.message
    clock.advance(IDLE * 3)  # suspension survives idle expiry
    assert service.check("demo", read()).reason == SESSION_SUSPENDED


def test_last_calls_stay_bounded_and_the_item_small(backend: Backend, clock: FixedClock) -> None:
    service = make_service(backend, clock, keep=10)
    principal = "editor@example.com"
    for i in range(60):
        clock.advance(1)
        service.check("demo", read() if i % 2 else write(principal=principal, call_id=f"{i:036d}"))
    stored = item(backend, "demo#s1")
    calls = stored["calls"]["L"]  # type: ignore[index]
    assert 10 <= len(calls) < 15
    decision = service.check("demo", read())
    assert [c.tool for c in decision.last_calls][-1] == "search_articles"
    size = len(json.dumps(stored))  # upper bound of DynamoDB's item size
    assert size < 1400


@pytest.mark.parametrize("tool", ["x)", "a OR b", "#pk", ":limit"])
def test_expression_syntax_in_names_is_only_data(
    backend: Backend, clock: FixedClock, tool: str
) -> None:
    service = make_service(backend, clock)
    decision = service.check("demo", CheckRequest(session_id=f"{tool} = :x", tool="delete_tag"))
    assert decision.allowed and decision.used == 1
