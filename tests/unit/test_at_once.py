"""An allowed write in one round trip (issue 29, part 1): the session's count and the
wider budgets' takes go at once, and stand only if the session counted the call."""

from __future__ import annotations

import threading
import time
from typing import Any

from chalicelib.check.requests import CheckRequest
from chalicelib.check.service import CheckService
from chalicelib.quota.answers import Allowed, Refused
from chalicelib.quota.core import BudgetKey, Scope, SessionKey
from chalicelib.quota.policy import parse_policy
from chalicelib.storage.memory.records import MemoryBudgets, MemoryCounters
from chalicelib.storage.ports import NotTaken
from tests.support import FixedClock, issue28_policy

POLICY = parse_policy(issue28_policy())  # 5 writes a session, the principal's 8 a day


class AtOnce:
    """Session counts and budget takes that each wait, when armed, until the session's
    count and both budgets' takes are all under way: a check that sends them one after
    the other breaks the barrier instead of answering."""

    def __init__(self) -> None:
        self.counters = MemoryCounters(POLICY.categories)
        self.budgets = MemoryBudgets()
        self.barrier: threading.Barrier | None = None

    def _meet(self) -> None:
        if self.barrier is not None:
            self.barrier.wait(timeout=5)

    def consume(self, *args: Any) -> Any:
        self._meet()
        return self.counters.consume(*args)

    def take(self, *args: Any) -> Any:
        self._meet()
        return self.budgets.take(*args)


def service(stores: AtOnce, clock: FixedClock) -> CheckService:
    counters: Any = _Proxy(stores.counters, consume=stores.consume)
    budgets: Any = _Proxy(stores.budgets, take=stores.take)
    return CheckService(POLICY, counters, clock, 3600, budgets=budgets)


class _Proxy:
    def __init__(self, inner: object, **overrides: Any) -> None:
        self._inner, self._overrides = inner, overrides

    def __getattr__(self, name: str) -> Any:
        return self._overrides.get(name) or getattr(self._inner, name)


def write(session: str = "s1") -> CheckRequest:
    return CheckRequest(session, "delete_tag", principal="alice")


def test_a_write_counts_its_session_and_the_wider_budgets_at_once(clock: FixedClock) -> None:
    stores = AtOnce()
    check = service(stores, clock)
    assert isinstance(check.check("demo", write()), Allowed)  # a session's first: in turn
    stores.barrier = threading.Barrier(3)  # the session, the principal, the tenant
    for _ in range(3):
        allowed = check.check("demo", write())
        assert isinstance(allowed, Allowed)
        assert {use.scope for use in allowed.scopes} == {Scope.PRINCIPAL, Scope.TENANT}
    principal = stores.budgets.get(BudgetKey.principal("demo", "alice"))
    assert principal is not None and sum(principal.counts[max(principal.counts)].values()) == 4


def test_what_a_session_refusal_took_at_once_goes_back(clock: FixedClock) -> None:
    """Near its limit a session counts first; a take that went with a count the session
    then refused (another check spent it meanwhile) is given back before the answer."""
    stores = AtOnce()
    check = service(stores, clock)
    for _ in range(3):
        assert isinstance(check.check("demo", write()), Allowed)
    # Another container spends the session's last two calls: this one's hint is stale.
    other = CheckService(POLICY, stores.counters, clock, 3600, budgets=stores.budgets)
    for _ in range(2):
        assert isinstance(other.check("demo", write()), Allowed)
    stores.barrier = threading.Barrier(3)
    refused = check.check("demo", write())
    assert isinstance(refused, Refused) and refused.scope is Scope.SESSION
    principal = stores.budgets.get(BudgetKey.principal("demo", "alice"))
    assert principal is not None and sum(principal.counts[max(principal.counts)].values()) == 5


def test_a_refusal_met_while_another_check_held_the_budget_is_asked_again(
    clock: FixedClock,
) -> None:
    """Defect class (found by the model test): a wider budget's refusal met while a take
    sent at once by another check here held its last call was answered 429 when that
    take had been given back before the refused check looked at the holds. Whatever
    the timing, a call is never refused for what another attempt held for a moment."""
    stores = AtOnce()
    principal = BudgetKey.principal("demo", "alice")
    go_on, refused = threading.Event(), threading.Event()
    holder: list[threading.Thread] = []

    def consume(attempt: Any, *rest: Any) -> Any:
        if holder and attempt.session.session_id == "s2":
            assert go_on.wait(timeout=5)  # s2's count waits while its take holds
        return stores.counters.consume(attempt, *rest)

    def take(key: BudgetKey, spend: Any) -> Any:
        taken = stores.budgets.take(key, spend)
        if holder and key == principal and isinstance(taken, NotTaken) and not refused.is_set():
            refused.set()  # s1 is refused while s2's take holds the last call ...
            go_on.set()  # ... which s2's check then gives back, and ends
            holder[0].join(timeout=5)
        return taken

    counters: Any = _Proxy(stores.counters, consume=consume)
    budgets: Any = _Proxy(stores.budgets, take=take)
    check = CheckService(POLICY, counters, clock, 3600, budgets=budgets)
    assert isinstance(check.check("demo", write("s2")), Allowed)  # s2 has room: at once
    other = CheckService(POLICY, stores.counters, clock, 3600, budgets=stores.budgets)
    for session in ("s3", "s3", "s3", "s3", "s3", "s4"):
        assert isinstance(other.check("demo", write(session)), Allowed)  # 7 of 8 used
    # Another container suspends s2: its next check here takes the principal's last
    # call at once, then its session refuses the call and the take goes back.
    stores.counters.suspend(SessionKey("demo", "s2"), "looping", clock())
    holder.append(threading.Thread(target=check.check, args=("demo", write("s2"))))
    holder[0].start()
    for _ in range(500):
        seen = stores.budgets.get(principal)
        if seen is not None and seen.used("write", max(seen.counts)) == 8:
            break
        time.sleep(0.01)
    answer = check.check("demo", write("s1"))
    assert refused.is_set(), "s1 was never refused while s2's take held the last call"
    assert isinstance(answer, Allowed), answer
