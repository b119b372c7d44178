"""The budget writes written once (`storage.budgets`) on the memory pair: what a failed
condition means does not depend on the backend, nor on what this container saw last."""

from __future__ import annotations

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
