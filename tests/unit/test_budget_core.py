"""The budget writes written once (`storage.budgets`) on the memory pair: what a failed
condition means does not depend on the backend, nor on what this container saw last."""

from __future__ import annotations

from typing import Any

from chalicelib.quota.changes import Change, Slot
from chalicelib.quota.core import BudgetKey, BudgetSnapshot, Spend
from chalicelib.storage.budgets import Budgets
from chalicelib.storage.memory.records import MemoryRecords, budget
from chalicelib.storage.ports import Taken
from tests.support import T0

KEY = BudgetKey.principal("demo", "alice")
MINUTE = 60_000


def test_a_take_a_container_thinks_the_first_of_its_window_counts_in_it_all_the_same() -> None:
    records = MemoryRecords[BudgetKey, BudgetSnapshot](budget)
    first, second = Budgets(records), Budgets(records)  # two containers, one table
    spend = Spend("write", 3, T0, T0 + MINUTE, T0)
    assert isinstance(first.take(KEY, spend), Taken)
    taken = second.take(KEY, spend)  # it never saw this window: tries a new one first
    assert isinstance(taken, Taken)
    assert taken.snapshot.counts == {T0: {"write": 2}}
    later = Spend("write", 3, T0 + MINUTE, T0 + 2 * MINUTE, T0 + MINUTE)
    assert isinstance(first.take(KEY, later), Taken)  # it saw the earlier window: same first
    assert isinstance(second.take(KEY, later), Taken)
    assert second.get(KEY) == BudgetSnapshot(counts={T0 + MINUTE: {"write": 2}})


class _Interleaved:
    """The memory pair, running `meanwhile` just before the first restart of a streak."""

    def __init__(self, records: MemoryRecords[BudgetKey, BudgetSnapshot], meanwhile: Any) -> None:
        self._records, self._meanwhile = records, meanwhile

    def read(self, key: BudgetKey) -> BudgetSnapshot | None:
        return self._records.read(key)

    def write(
        self, key: BudgetKey, change: Change, rule: Any, doing: str, before: bool = False
    ) -> Any:
        if self._meanwhile is not None and any(s is Slot.STREAKS for s, _, _ in change.put):
            meanwhile, self._meanwhile = self._meanwhile, None
            meanwhile()
        return self._records.write(key, change, rule, doing, before)


def test_two_refusals_after_an_allowed_call_make_a_streak_of_two_whatever_their_order() -> None:
    records = MemoryRecords[BudgetKey, BudgetSnapshot](budget)
    Budgets(records).note_streak(KEY, "write", T0, 0)  # refused, then a call allowed at T0+10
    other = Budgets(records)
    first = Budgets(
        _Interleaved(records, lambda: other.note_streak(KEY, "write", T0 + 20, T0 + 10))
    )
    # Both find the streak ended by the allowed call; the other restarts it first.
    assert first.note_streak(KEY, "write", T0 + 20, T0 + 10) == (2, False)
    snapshot = records.read(KEY)
    assert snapshot is not None and snapshot.streak("write") == 2
