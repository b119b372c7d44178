"""The trouble-index write for a call that spends its session's budget goes beside the
wider budgets' writes, not after them: an allowed write stays two round trips."""

from __future__ import annotations

import json
import threading

from chalicelib.check.requests import CheckRequest
from chalicelib.check.spent import MarksSpentSessions
from chalicelib.quota.answers import Allowed
from chalicelib.quota.core import BudgetKey, Spend
from chalicelib.quota.policy import POLICY_DIR, parse_policy
from chalicelib.storage.memory.budgets import MemoryBudgets
from chalicelib.storage.memory.counters import MemoryCounters
from chalicelib.storage.ports import NotTaken, Taken, TroubleKind, TroubleMark
from tests.support import FixedClock

POLICY = parse_policy(json.loads((POLICY_DIR / "default.json").read_text()))
WAIT_S = 10  # generous: only a deadlock (the writes made one after the other) reaches it


class MeetingBudgets(MemoryBudgets):
    """Budgets whose take, once armed, waits until the index write has started too."""

    def __init__(self) -> None:
        super().__init__()
        self.armed = False
        self.took = threading.Event()
        self.marking = threading.Event()

    def take(self, key: BudgetKey, spend: Spend) -> Taken | NotTaken:
        if self.armed:
            self.took.set()
            assert self.marking.wait(WAIT_S), "the index write waited for the budgets"
        return super().take(key, spend)


def test_the_call_that_spends_the_session_marks_it_beside_the_wider_budgets() -> None:
    budgets = MeetingBudgets()
    marks: list[TroubleMark] = []

    def mark(found: TroubleMark) -> None:
        budgets.marking.set()
        assert budgets.took.wait(WAIT_S), "the budgets waited for the index write"
        marks.append(found)

    clock = FixedClock()
    service = MarksSpentSessions(
        POLICY, MemoryCounters(POLICY.categories), clock, 3600, budgets=budgets, mark=mark
    )
    request = CheckRequest(session_id="s1", tool="delete_tag", principal="bot")
    for _ in range(14):
        assert isinstance(service.check("demo", request), Allowed)
        clock.advance(1)
    assert marks == []
    budgets.armed = True
    last = service.check("demo", request)
    assert isinstance(last, Allowed) and last.used == last.limit == 15
    assert [(m.session_id, m.kind, m.category) for m in marks] == [
        ("s1", TroubleKind.EXHAUSTED, "write")
    ]
