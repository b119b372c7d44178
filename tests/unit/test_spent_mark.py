"""The call that spends its session's budget puts the session in the listing's index once
it is counted at every scope, and only then: a call answered 503 marks nothing. The mark
hangs off the service's one listener (`DecisionReporter.on_counted`), not a subclass."""

from __future__ import annotations

import json

import pytest

from chalicelib.check.alerts import DecisionReporter
from chalicelib.check.auditing import Auditor
from chalicelib.check.requests import CheckRequest
from chalicelib.check.service import CheckService
from chalicelib.notify import Notification
from chalicelib.quota.answers import Allowed
from chalicelib.quota.core import BudgetKey, Spend
from chalicelib.quota.policy import POLICY_DIR, parse_policy
from chalicelib.storage.errors import StoreUnavailable
from chalicelib.storage.memory.audit import MemoryAuditLog
from chalicelib.storage.memory.records import MemoryBudgets, MemoryCounters
from chalicelib.storage.ports import NotTaken, Taken, TroubleKind, TroubleMark
from tests.support import FixedClock

POLICY = parse_policy(json.loads((POLICY_DIR / "default.json").read_text()))
REQUEST = CheckRequest(session_id="s1", tool="delete_tag", principal="bot")


class NoEmail:
    """A publisher with notifications off: these tests send none."""

    enabled = False

    def publish(self, note: Notification) -> str:
        raise AssertionError(f"no email expected: {note}")


class FailingBudgets(MemoryBudgets):
    """Budgets that, once armed, are throttled."""

    armed = False

    def take(self, key: BudgetKey, spend: Spend) -> Taken | NotTaken:
        if self.armed:
            raise StoreUnavailable("taking from a budget", throttled=True)
        return super().take(key, spend)


def _service(budgets: MemoryBudgets, marks: list[TroubleMark]) -> CheckService:
    clock = FixedClock()
    counters = MemoryCounters(POLICY.categories)
    reporter = DecisionReporter(POLICY, Auditor(MemoryAuditLog()), NoEmail(), trouble=marks.append)
    service = CheckService(POLICY, counters, clock, 3600, budgets=budgets, listener=reporter)
    for _ in range(14):
        assert isinstance(service.check("demo", REQUEST), Allowed)
        clock.advance(1)
    return service


def test_the_call_that_spends_the_session_marks_it_once_counted_everywhere() -> None:
    marks: list[TroubleMark] = []
    service = _service(MemoryBudgets(), marks)
    assert marks == []
    last = service.check("demo", REQUEST)
    assert isinstance(last, Allowed) and last.used == last.limit == 15
    assert [(m.session_id, m.kind, m.category) for m in marks] == [
        ("s1", TroubleKind.EXHAUSTED, "write")
    ]


def test_a_spending_call_answered_503_marks_nothing() -> None:
    marks: list[TroubleMark] = []
    budgets = FailingBudgets()
    service = _service(budgets, marks)
    budgets.armed = True
    with pytest.raises(StoreUnavailable):
        service.check("demo", REQUEST)
    assert marks == []
