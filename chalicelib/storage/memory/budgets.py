"""In-memory principal and tenant budgets."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from chalicelib.quota.core import (
    BudgetKey,
    BudgetSnapshot,
    Spend,
)
from chalicelib.quota.rules import (
    budget_give_back,
    budget_raise,
    budget_take,
    streak_ends,
    streak_goes_on,
)
from chalicelib.storage.ports import (
    NotTaken,
    RecordChanged,
    RecordNotFound,
    Taken,
)


@dataclass
class _Budget:
    counts: dict[tuple[str, int], int] = field(default_factory=dict)
    raised: dict[str, int] = field(default_factory=dict)
    notified: dict[str, tuple[int, int]] = field(default_factory=dict)
    streak: int = 0
    last_refusal_ms: int = 0
    suspended_reason: str | None = None

    def snapshot(self) -> BudgetSnapshot:
        counts: dict[int, dict[str, int]] = {}
        for (category, start), count in self.counts.items():
            counts.setdefault(start, {})[category] = count
        last = self.last_refusal_ms or None  # 0: never refused
        return BudgetSnapshot(counts, dict(self.raised), self.suspended_reason, self.streak, last)


class MemoryBudgets:
    """The budgets port (principal and tenant windows) in a dict, under one lock."""

    def __init__(self) -> None:
        self._budgets: dict[BudgetKey, _Budget] = {}
        self._lock = threading.Lock()

    def take(self, key: BudgetKey, spend: Spend) -> Taken | NotTaken:
        """Count the calls if the core's rule (`rules.budget_take`) holds."""
        with self._lock:
            budget = self._budgets.setdefault(key, _Budget())
            slot = (spend.category, spend.window_start_ms)
            if not budget_take(spend).holds(budget.snapshot()):
                return NotTaken(budget.snapshot())
            used = budget.counts.get(slot, 0)
            # As the DynamoDB item: one window counted per category, the current one.
            for other in [s for s in budget.counts if s[0] == spend.category and s != slot]:
                del budget.counts[other]
            budget.counts[slot] = used + spend.units
            return Taken(budget.snapshot())

    def give_back(self, key: BudgetKey, spend: Spend) -> None:
        """Undo one take of this window."""
        with self._lock:
            budget = self._budgets.get(key)
            slot = (spend.category, spend.window_start_ms)
            if budget is not None and budget_give_back(spend).holds(budget.snapshot()):
                budget.counts[slot] -= spend.units

    def note_refusal(self, key: BudgetKey, spend: Spend) -> bool:
        """Whether this is the first refusal at this window and limit."""
        mark = (spend.window_start_ms, spend.limit)
        with self._lock:
            budget = self._budgets.setdefault(key, _Budget())
            first = budget.notified.get(spend.category) != mark
            budget.notified[spend.category] = mark
            return first

    def note_streak(
        self,
        key: BudgetKey,
        now_ms: int,
        allowed_since_ms: int,
        spend: Spend | None = None,
        refusals: int = 1,
    ) -> tuple[int, bool]:
        """Count a refusal in the principal's streak (it starts again after an allowed
        call of the refused session), marking this budget's own refusal if `spend`."""
        first = spend is not None and self.note_refusal(key, spend)
        with self._lock:
            budget = self._budgets.setdefault(key, _Budget())
            goes_on = streak_goes_on(allowed_since_ms).holds(budget.snapshot())
            budget.streak = budget.streak + refusals if goes_on else refusals
            budget.last_refusal_ms = now_ms
            return budget.streak, first

    def end_streak(self, key: BudgetKey, now_ms: int) -> None:
        """A call of this principal was allowed at every scope: its streak ends."""
        with self._lock:
            budget = self._budgets.get(key)
            if budget is not None and streak_ends(now_ms).holds(budget.snapshot()):
                budget.streak = 0

    def get(self, key: BudgetKey) -> BudgetSnapshot | None:
        """The budget as stored, or None."""
        with self._lock:
            budget = self._budgets.get(key)
            return budget.snapshot() if budget else None

    def raise_limit(self, key: BudgetKey, category: str, new_limit: int) -> BudgetSnapshot:
        """Raise a category's limit, never below a raise set meanwhile.

        Raises:
            RecordChanged: a higher raise was set meanwhile.
        """
        with self._lock:
            budget = self._budgets.setdefault(key, _Budget())
            if not budget_raise(category, new_limit).holds(budget.snapshot()):
                raise RecordChanged("raising a budget")
            budget.raised[category] = new_limit
            budget.streak = 0
            return budget.snapshot()

    def suspend(self, key: BudgetKey, reason: str) -> tuple[BudgetSnapshot, bool]:
        """Suspend; returns the budget and whether it was newly suspended."""
        with self._lock:
            budget = self._budgets.setdefault(key, _Budget())
            newly = budget.suspended_reason is None
            budget.suspended_reason = reason
            return budget.snapshot(), newly

    def resume(self, key: BudgetKey) -> BudgetSnapshot:
        """Lift a suspension and the refusal streak.

        Raises:
            RecordNotFound: the budget does not exist.
        """
        with self._lock:
            budget = self._budgets.get(key)
            if budget is None:
                raise RecordNotFound("resuming a budget")
            budget.suspended_reason = None
            budget.streak = 0
            return budget.snapshot()

    def reset(self, key: BudgetKey) -> BudgetSnapshot:
        """Zero the counters of every window.

        Raises:
            RecordNotFound: the budget does not exist.
        """
        with self._lock:
            budget = self._budgets.get(key)
            if budget is None:
                raise RecordNotFound("resetting a budget")
            budget.counts.clear()
            budget.streak = 0
            return budget.snapshot()
