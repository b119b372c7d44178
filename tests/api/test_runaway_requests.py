"""What a runaway loop's refusals cost the store (issue 29, part 2): at most one request
per refused check in steady state (at one call a second too), none for a repeat within a
second of a refusal the store gave in this container (two, in a loop), and a raise or
reset seen at once."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from chalicelib.check.afterwards import settle_all
from chalicelib.check.escalation import STREAK_BATCH_MS
from chalicelib.check.runaway import LOOP_CACHE_MS, REFUSAL_CACHE_MS
from tests.api.conftest import Api, body, running_api
from tests.api.test_scopes import POLICY, scoped, write
from tests.support import FixedClock

__all__ = ["scoped"]  # the fixture, used by name
N = int(str(POLICY["suspend_after_refusals"]))  # 6


@pytest.fixture
def looped(tmp_path: Any, clock: FixedClock) -> Iterator[Api]:
    """The scoped policy on moto's DynamoDB, where store requests can be counted."""
    policy = tmp_path / "scoped.json"
    policy.write_text(json.dumps({**POLICY, "suspend_after_refusals": 50}))
    with running_api(clock, "dynamodb", policy=str(policy)) as api:
        yield api


class Requests:
    """Counts the DynamoDB requests the service makes."""

    def __init__(self, api: Api) -> None:
        self.seen: Counter[str] = Counter()
        self._events = api.container.dynamodb.meta.events
        self._events.register("before-call.dynamodb", self._count)

    def _count(self, model: Any, **_: Any) -> None:
        self.seen[model.name] += 1

    def total(self) -> int:
        return sum(self.seen.values())

    def close(self) -> None:
        self._events.unregister("before-call.dynamodb", self._count)


def spend(api: Api, session: str) -> None:
    """The session's 3 writes, then the store's first refusals."""
    assert [write(api, session).status_code for _ in range(3)] == [200] * 3
    assert write(api, session).status_code == 429


def loop_requests(api: Api, rate: int, refusals: int) -> Counter[str]:
    """The store requests of `refusals` refused calls of a spent session at `rate` a
    second, after the container has seen it spent."""
    spend(api, "loop")
    write(api, "loop")  # the container now knows the session spent
    counted = Requests(api)
    try:
        for _ in range(refusals):
            api.clock.advance(1 / rate)
            assert write(api, "loop").status_code == 429
    finally:
        counted.close()
    return counted.seen


@pytest.mark.parametrize("rate", [1, 2, 4, 10])
def test_a_runaway_loop_costs_at_most_one_request_per_refusal(looped: Api, rate: int) -> None:
    """Defect class: cost amplification. A refusal in a runaway loop cost two store
    requests (the session's record and the principal's streak) every time; then, at two
    calls a second, each refusal the store gave still cost both; then, at one call a
    second, 1.15 (no repeat fell within the 1 s window, and the streak came on top)."""
    seen = loop_requests(looped, rate, 20)
    assert sum(seen.values()) / 20 <= 1.0, seen


def test_a_runaway_loops_streak_is_batched_and_sent_within_the_window(looped: Api) -> None:
    """Defect classes: cost amplification, late escalation. At one call a second each
    refusal cost its guarded write and its principal's streak. The streak now waits, but
    reaches the store within `STREAK_BATCH_MS` while the loop goes on (one extra request
    per window), and a loop's repeat within `LOOP_CACHE_MS` of the store's last refusal
    is refused from memory: every other call at one a second."""
    window = STREAK_BATCH_MS // 1000
    refusals = 3 * window
    seen = loop_requests(looped, 1, refusals)
    settle_all(10)  # the records held back are made after the answers
    principal = body(looped.get("/v1/principals/bot"))
    # 2 before the loop, then its refusals: the stored streak lags by at most a window.
    assert principal["streaks"]["write"] >= 2 + refusals - window, principal
    writes = seen["UpdateItem"]  # the other requests are the caches' 30 s refreshes
    from_store = refusals * REFUSAL_CACHE_MS // LOOP_CACHE_MS
    assert from_store <= writes <= from_store + refusals // window + 1, seen


def test_a_repeat_within_a_second_costs_no_request(looped: Api) -> None:
    """Defect class: cost amplification. A repeat refusal within the same second, same
    session and category, went to the store again."""
    spend(looped, "loop")
    write(looped, "loop")
    counted = Requests(looped)
    try:
        answers = [write(looped, "loop") for _ in range(5)]
    finally:
        counted.close()
    assert [a.status_code for a in answers] == [429] * 5
    assert {body(a)["error"]["code"] for a in answers} == {"quota_exceeded"}
    assert counted.total() == 0, counted.seen


def test_a_raise_is_seen_at_once_by_a_cached_refusal(looped: Api) -> None:
    """Defect class: stale cache. A refusal the container remembers must not outlive an
    administrator's raise or reset of the session, even within the same second."""
    spend(looped, "loop")
    write(looped, "loop")
    raised = looped.admin("/v1/sessions/loop/raise", {"category": "write", "add": 1, "reason": "x"})
    assert raised.status_code == 200
    assert write(looped, "loop").status_code == 200
    assert write(looped, "loop").status_code == 429
    write(looped, "loop")
    reset = looped.admin("/v1/sessions/loop/reset", {"reason": "new batch"})
    assert reset.status_code == 200
    assert write(looped, "loop").status_code == 200


def test_cached_refusals_suspend_the_principal_at_the_same_refusal(scoped: Api) -> None:
    """Defect class: late escalation. Refusals answered from the container still count in
    the principal's streak: the suspension comes at the N-th refusal, as before."""
    assert [write(scoped, "s").status_code for _ in range(3)] == [200] * 3
    codes = [body(write(scoped, "s"))["error"]["code"] for _ in range(N + 2)]
    assert codes[:N] == ["quota_exceeded"] * N
    assert set(codes[N:]) == {"principal_suspended"}


def test_a_principal_reset_forgets_refusals_answered_from_memory(scoped: Api) -> None:
    """Defect class: innocent suspension. Refusals answered from the container wait to be
    counted with the next refusal sent; an administrator's reset of the principal made
    between them did not drop them, so the streak after the reset started above zero and
    the principal was suspended early."""
    assert [write(scoped, "s").status_code for _ in range(3)] == [200] * 3
    codes = [body(write(scoped, "s"))["error"]["code"] for _ in range(N - 1)]
    assert codes == ["quota_exceeded"] * (N - 1)  # most of them answered from memory
    reset = scoped.admin("/v1/principals/bot/reset", {"reason": "looked at it"})
    assert reset.status_code == 200, body(reset)
    after = [body(write(scoped, "s"))["error"]["code"] for _ in range(N + 1)]
    assert after[: N - 1] == ["quota_exceeded"] * (N - 1), after


def test_refusals_answered_from_memory_reach_the_views_within_the_window(looped: Api) -> None:
    """Defect class: a silently wrong count. Repeats refused from the container's memory
    were recorded only with the session's next refusal that reached the store: a loop
    that stopped was shown with fewer refusals than it got, for ever. They are now
    recorded by the container's first check after the cache window."""
    spend(looped, "loop")
    codes = [write(looped, "loop").status_code for _ in range(4)]
    assert codes == [429] * 4
    looped.clock.advance(1.5)
    assert write(looped, "another", "someone-else").status_code == 200  # any check here
    settle_all(10)  # recorded after that check's answer
    session = body(looped.get("/v1/sessions/loop"))
    assert session["categories"]["write"]["refused"] == 5
    principal = body(looped.get("/v1/principals/bot"))
    assert principal["streaks"] == {"write": 5}


def test_flush_held_records_what_a_loop_held_back_before_it_is_due(looped: Api) -> None:
    """`CheckService.flush_held` (a bench's round, a container about to stop): what the
    cache answered is recorded at once, not only at the next check after the window."""
    spend(looped, "loop")
    assert [write(looped, "loop").status_code for _ in range(4)] == [429] * 4
    looped.container.checks.flush_held()  # no time passes, no other check
    settle_all(10)
    session = body(looped.get("/v1/sessions/loop"))
    assert session["categories"]["write"]["refused"] == 5
    principal = body(looped.get("/v1/principals/bot"))
    assert principal["streaks"] == {"write": 5}


def test_a_call_counted_between_refusals_does_not_drop_those_held_back(looped: Api) -> None:
    """Defect class: a silently wrong count (found by a newcomer). A refusal answered from
    memory, then an allowed call of another category in the same session: the count of
    the session forgot the loop's refusals it held back, for good (refused 1 of 2, and the
    principal's streak one short each round)."""
    spend(looped, "loop")  # 3 writes, then the store's refusal
    rounds = 5
    for _ in range(rounds):
        assert write(looped, "loop").status_code == 429
        assert write(looped, "loop").status_code == 429
        read = looped.check(session_id="loop", tool="search_articles", principal="bot")
        assert read.status_code == 200
    settle_all(10)
    looped.container.checks.flush_held()
    settle_all(10)
    session = body(looped.get("/v1/sessions/loop"))
    assert session["categories"]["write"]["refused"] == 1 + 2 * rounds
    principal = body(looped.get("/v1/principals/bot"))
    assert principal["streaks"] == {"write": 1 + 2 * rounds}
