"""In-memory principal and tenant budgets: the core's rules and changes under one lock."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from chalicelib.quota.changes import (
    BUDGET_RESET,
    BUDGET_RESUMED,
    Change,
    Field,
    Slot,
    budget_given_back,
    budget_marked,
    budget_raised,
    budget_suspended,
    budget_taken,
    first_at,
    streak_ended,
    streak_noted,
)
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
from chalicelib.quota.writes import WriteId
from chalicelib.storage.memory.changes import apply
from chalicelib.storage.ports import (
    NotTaken,
    RecordChanged,
    RecordNotFound,
    Taken,
)

_MAPS = {
    Slot.COUNTS: "counts",
    Slot.WINDOWS: "windows",
    Slot.RAISED: "raised",
    Slot.MARKS: "marks",
    Slot.STREAKS: "streaks",
    Slot.LAST_REFUSALS: "last_refusals",
}
_FIELDS = {
    Field.SUSPENDED: "suspended_reason",
    Field.EXPIRES: "expires_ms",
}


@dataclass
class _Budget:
    counts: dict[str, int] = field(default_factory=dict)  # in the window `windows` names
    windows: dict[str, int] = field(default_factory=dict)
    raised: dict[str, int] = field(default_factory=dict)
    marks: dict[str, tuple[int, int]] = field(default_factory=dict)
    streaks: dict[str, int] = field(default_factory=dict)
    last_refusals: dict[str, int] = field(default_factory=dict)
    suspended_reason: str | None = None
    expires_ms: int | None = None

    def snapshot(self) -> BudgetSnapshot:
        counts: dict[int, dict[str, int]] = {}
        for category, count in self.counts.items():
            if category in self.windows:
                counts.setdefault(self.windows[category], {})[category] = count
        return BudgetSnapshot(
            counts,
            dict(self.raised),
            self.suspended_reason,
            dict(self.streaks),
            dict(self.last_refusals),
        )


class MemoryBudgets:
    """The budgets port (principal and tenant windows) in a dict, under one lock."""

    def __init__(self) -> None:
        self._budgets: dict[BudgetKey, _Budget] = {}
        self._lock = threading.Lock()

    def _write(self, key: BudgetKey, change: Change) -> _Budget:
        budget = self._budgets.setdefault(key, _Budget())
        apply(budget, change, _MAPS, _FIELDS)
        return budget

    def _snapshot(self, key: BudgetKey) -> BudgetSnapshot | None:
        budget = self._budgets.get(key)
        return budget.snapshot() if budget is not None else None

    def take(self, key: BudgetKey, spend: Spend) -> Taken | NotTaken:
        """Count the calls if the core's rule (`rules.budget_take`) holds."""
        with self._lock:
            seen = self._snapshot(key)
            if not budget_take(spend).holds(seen):
                return NotTaken(seen)
            budget = self._budgets.get(key)
            fresh = budget is None or budget.windows.get(spend.category) != spend.window_start_ms
            return Taken(self._write(key, budget_taken(spend, fresh)).snapshot())

    def give_back(self, key: BudgetKey, spend: Spend, again: WriteId | None = None) -> None:
        """Undo one take of this window (`again` never comes: every answer here does)."""
        with self._lock:
            if budget_give_back(spend).holds(self._snapshot(key)):
                self._write(key, budget_given_back(spend))

    def give_back_if_taken(self, key: BudgetKey, spend: Spend, take: WriteId) -> None:
        """Nothing: a take here always answers, so none is left uncertain."""

    def _first(self, key: BudgetKey, spend: Spend | None) -> bool:
        if spend is None:
            return False
        budget = self._budgets.get(key)
        return first_at(budget.marks.get(spend.category) if budget else None, spend)

    def note_refusal(self, key: BudgetKey, spend: Spend) -> bool:
        """Whether this is the first refusal at this window and limit."""
        with self._lock:
            first = self._first(key, spend)
            self._write(key, budget_marked(spend))
            return first

    def note_streak(
        self,
        key: BudgetKey,
        category: str,
        now_ms: int,
        allowed_since_ms: int,
        spend: Spend | None = None,
        refusals: int = 1,
    ) -> tuple[int, bool]:
        """`BudgetCounters.note_streak`, under the lock."""
        with self._lock:
            first = self._first(key, spend)
            goes_on = streak_goes_on(category, allowed_since_ms).holds(self._snapshot(key))
            change = streak_noted(category, now_ms, refusals, goes_on, spend)
            budget = self._write(key, change)
            return budget.streaks.get(category, 0), first

    def end_streak(self, key: BudgetKey, category: str, now_ms: int) -> None:
        """A call of this principal in `category` was allowed at every scope: its streak
        there ends."""
        with self._lock:
            seen = self._snapshot(key)
            if seen is not None and streak_ends(category, now_ms).holds(seen):
                self._write(key, streak_ended(category))

    def get(self, key: BudgetKey) -> BudgetSnapshot | None:
        """The budget as stored, or None."""
        with self._lock:
            return self._snapshot(key)

    def raise_limit(self, key: BudgetKey, category: str, new_limit: int) -> BudgetSnapshot:
        """Raise a category's limit, never below a raise set meanwhile.

        Raises:
            RecordChanged: a higher raise was set meanwhile.
        """
        with self._lock:
            if not budget_raise(category, new_limit).holds(self._snapshot(key)):
                raise RecordChanged("raising a budget")
            return self._write(key, budget_raised(category, new_limit)).snapshot()

    def suspend(self, key: BudgetKey, reason: str) -> tuple[BudgetSnapshot, bool]:
        """Suspend; returns the budget and whether it was newly suspended."""
        with self._lock:
            seen = self._snapshot(key)
            newly = seen is None or not seen.suspended
            return self._write(key, budget_suspended(reason)).snapshot(), newly

    def resume(self, key: BudgetKey) -> BudgetSnapshot:
        """Lift a suspension and every category's refusal streak.

        Raises:
            RecordNotFound: the budget does not exist.
        """
        with self._lock:
            if key not in self._budgets:
                raise RecordNotFound("resuming a budget")
            return self._write(key, BUDGET_RESUMED).snapshot()

    def reset(self, key: BudgetKey) -> BudgetSnapshot:
        """Zero the counters of every window.

        Raises:
            RecordNotFound: the budget does not exist.
        """
        with self._lock:
            if key not in self._budgets:
                raise RecordNotFound("resetting a budget")
            return self._write(key, BUDGET_RESET).snapshot()
