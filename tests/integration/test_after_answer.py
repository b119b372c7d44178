"""Issue 29: an allowed write answers in one round trip. Its call id's admission (only
then is a copy of the call a duplicate) is made after the answer (`check.afterwards`): the
answer never waits for it, a copy through the same container waits for it, a copy through
another container is answered 409 until it lands, and one that never lands leaves every
count matching an allowed call. On every backend (memory, moto, dynalite)."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from chalicelib.check.afterwards import settle_all
from chalicelib.check.requests import CheckRequest
from chalicelib.check.service import CheckService
from chalicelib.errors import CallInProgress
from chalicelib.quota.answers import Allowed
from chalicelib.quota.core import IN_PROGRESS_MS, BudgetKey, CallLife, SessionKey
from chalicelib.quota.policy import parse_policy
from chalicelib.storage.ports import SessionChecks, StoreUnavailable
from tests.support import FixedClock, Stores, issue28_policy

POLICY = parse_policy(issue28_policy(suspend_after=1000))
DIGEST = "d" * 64


def delete(**kw: Any) -> CheckRequest:
    return CheckRequest(session_id="s1", tool="delete_tag", principal="alice", **kw)


class HeldAdmissions:
    """The real session store, with each admission held until the test lets it go (or
    failing, when `fail` is set): a check answered before its admission landed."""

    def __init__(self, inner: SessionChecks, fail: bool = False) -> None:
        self._inner = inner
        self._fail = fail
        self.reached = threading.Event()
        self.go = threading.Event()

    def admit(self, attempt: Any, life: CallLife) -> bool:
        self.reached.set()
        assert self.go.wait(30)
        if self._fail:
            raise StoreUnavailable("admitting a counted call", retry_after_seconds=1)
        return self._inner.admit(attempt, life)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def service_on(stores: Stores, clock: Any, counters: Any = None) -> CheckService:
    counters = counters or stores.counters
    return CheckService(POLICY, counters, clock, 3600, budgets=stores.budgets)


def counted(stores: Stores) -> tuple[int, int]:
    """The call's count in its session and in its principal's budget."""
    session = stores.counters.get(SessionKey("demo", "s1"))
    principal = stores.budgets.get(BudgetKey.principal("demo", "alice"))
    in_session = 0 if session is None else session.counts.get("write", 0)
    counts = {} if principal is None else principal.counts
    in_principal = sum(sum(c.values()) for c in counts.values())
    return in_session, in_principal


def test_the_answer_does_not_wait_for_the_admission(stores: Stores, clock: FixedClock) -> None:
    """Defect class: an allowed write with a call id answered only after a second round
    trip (its admission), so writes were slower than the unsafe read-then-write counter.
    Here the admission is held: the check answers anyway, a copy through another
    container is answered 409 meanwhile, and one through the same container waits for it
    and is its duplicate."""
    held = HeldAdmissions(stores.counters)
    service = service_on(stores, clock, held)
    other = service_on(stores, clock)
    request = delete(call_id="c-1", args_digest=DIGEST)
    with ThreadPoolExecutor(2) as pool:
        first = pool.submit(service.check, "demo", request)
        answer = first.result(10)  # the admission is still held
        assert isinstance(answer, Allowed) and not answer.duplicate
        assert held.reached.wait(10)
        with pytest.raises(CallInProgress):
            other.check("demo", request)
        copy = pool.submit(service.check, "demo", request)
        assert not copy.done()
        held.go.set()
        again = copy.result(10)
    assert isinstance(again, Allowed) and again.duplicate
    assert settle_all(10)
    later = other.check("demo", request)
    assert isinstance(later, Allowed) and later.duplicate
    assert counted(stores) == (1, 1)


def test_a_lost_admission_leaves_every_count_matching_an_allowed_call(
    stores: Stores, clock: FixedClock
) -> None:
    """The store fails on the admission, after the answer: the call stays counted and
    allowed once; its copies are answered 409 while its life lasts, then counted anew
    (allowed and counted twice: never a count without an allowed call)."""
    held = HeldAdmissions(stores.counters, fail=True)
    held.go.set()
    service = service_on(stores, clock, held)
    other = service_on(stores, clock)
    request = delete(call_id="c-2", args_digest=DIGEST)
    assert isinstance(service.check("demo", request), Allowed)
    assert settle_all(10)
    with pytest.raises(CallInProgress):
        other.check("demo", request)
    clock.advance(IN_PROGRESS_MS / 1000 + 1)
    anew = other.check("demo", request)
    assert isinstance(anew, Allowed) and not anew.duplicate
    assert settle_all(10)
    assert counted(stores) == (2, 2)
