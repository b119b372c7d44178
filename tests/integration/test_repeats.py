"""The loop breaker on every backend (memory, moto, dynalite): the consume condition with
its repeat clause is one valid DynamoDB write, and answers as the rule says."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

from chalicelib.check.requests import CheckRequest
from chalicelib.check.service import CheckService
from chalicelib.quota.answers import Allowed, Decision, Refused
from chalicelib.quota.core import RefusalReason, SessionKey
from chalicelib.quota.policy import POLICY_DIR, parse_policy
from chalicelib.storage.dynamodb.counters import CounterStore
from tests.support import Backend, FixedClock, Stores

IDLE = 3600
POLICY = parse_policy(json.loads((POLICY_DIR / "default.json").read_text()))
DIGEST = "0123456789abcdef" * 4
OTHER = "f" * 64
S1 = SessionKey("demo", "s1")


def checks(stores: Stores, clock: FixedClock) -> CheckService:
    return CheckService(POLICY, stores.counters, clock, IDLE)


def delete(digest: str = DIGEST, tool: str = "delete_tag", **kw: Any) -> CheckRequest:
    return CheckRequest(session_id="s1", tool=tool, args_digest=digest, **kw)


def refused(decision: Decision) -> Refused:
    assert isinstance(decision, Refused), decision
    return decision


def test_the_fourth_same_call_is_refused_and_not_counted(stores: Stores, clock: FixedClock) -> None:
    service = checks(stores, clock)
    for _ in range(3):
        assert isinstance(service.check("demo", delete()), Allowed)
        clock.advance(1)
    fourth = refused(service.check("demo", delete()))
    assert fourth.reason is RefusalReason.REPEATED_CALL
    assert fourth.used == 3 and not fourth.first_exhaustion
    assert "already called with the same arguments 3 times in this 10-minute window, " in (
        fourth.message
    )
    assert fourth.last_calls[-1].tool == "delete_tag" and not fourth.last_calls[-1].allowed
    # Other arguments, or another tool, still run.
    assert isinstance(service.check("demo", delete(OTHER)), Allowed)
    assert isinstance(service.check("demo", delete(tool="delete_tags")), Allowed)
    seen = stores.counters.get(S1)
    assert seen is not None and seen.counts["write"] == 5


def test_a_retry_under_the_same_call_id_is_no_repeat(stores: Stores, clock: FixedClock) -> None:
    service = checks(stores, clock)
    first = service.check("demo", delete(call_id="c1"))
    assert isinstance(first, Allowed)
    for _ in range(3):
        again = service.check("demo", delete(call_id="c1"))
        assert isinstance(again, Allowed) and again.duplicate
    assert isinstance(service.check("demo", delete(call_id="c2")), Allowed)


def test_the_next_window_runs_the_call_again_and_forgets_the_last(
    stores: Stores, clock: FixedClock
) -> None:
    service = checks(stores, clock)
    for _ in range(3):
        service.check("demo", delete())
    assert refused(service.check("demo", delete())).reason is RefusalReason.REPEATED_CALL
    clock.advance(600)
    assert isinstance(service.check("demo", delete(OTHER)), Allowed)
    seen = stores.counters.get(S1)
    assert seen is not None and set(seen.repeats.values()) == {1}  # past window dropped
    assert isinstance(service.check("demo", delete()), Allowed)


def test_a_repeat_leaves_the_first_exhaustion_to_the_limit(
    stores: Stores, clock: FixedClock
) -> None:
    service = checks(stores, clock)
    for _ in range(3):
        service.check("demo", delete())
    assert refused(service.check("demo", delete())).reason is RefusalReason.REPEATED_CALL
    for i in range(12):
        assert isinstance(service.check("demo", delete(f"{i:02x}" * 32)), Allowed)
    spent = refused(service.check("demo", delete("e" * 64)))
    assert spent.reason is RefusalReason.QUOTA_EXCEEDED and spent.first_exhaustion


def test_an_allowed_call_after_its_window_ended_is_still_one_request(
    backend: Backend, clock: FixedClock
) -> None:
    """The loop breaker's counts of ended windows leave in the next count's own write: an
    allowed call stays one UpdateItem, and the item keeps only the live window's keys."""
    sent: Counter[str] = Counter()

    def count(model: Any, **_: Any) -> None:
        sent[model.name] += 1

    backend.client.meta.events.register("before-call.dynamodb", count)
    counters = CounterStore(backend.client, backend.settings.counters_table, POLICY.categories)
    service = CheckService(POLICY, counters, clock, IDLE)
    assert isinstance(service.check("demo", delete()), Allowed)  # the container sees it
    sent.clear()
    for window in range(6):
        clock.advance(600)
        assert isinstance(service.check("demo", delete(OTHER if window % 2 else DIGEST)), Allowed)
    assert sent == {"UpdateItem": 6}
    seen = counters.get(S1)
    assert seen is not None and list(seen.repeats.values()) == [1]
