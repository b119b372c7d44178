"""The budgets port (`ports.BudgetCounters`), written once on any backend's narrow pair
(`record_port.RecordStore`): which rule and change each write uses, what a failed
condition means, and the write numbers (`quota.writes`) that make a write sent again by
the store's client (botocore's retry of a timed-out request) count once.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TypeAlias

from chalicelib.quota.changes import (
    BUDGET_RESET,
    BUDGET_RESUMED,
    Change,
    budget_given_back,
    budget_marked,
    budget_raised,
    budget_suspended,
    budget_taken,
    first_at,
    streak_ended,
    streak_noted,
    written,
)
from chalicelib.quota.core import BudgetKey, BudgetSnapshot, Spend
from chalicelib.quota.facts import BudgetExists, Condition, NotWrittenBy, all_of
from chalicelib.quota.rules import (
    budget_give_back,
    budget_give_back_taken,
    budget_raise,
    budget_take,
    streak_ends,
    streak_goes_on,
    streak_restarts,
    unwritten,
)
from chalicelib.quota.writes import PER_MS, WriteId, applied, given_back, stale
from chalicelib.storage.errors import (
    RecordChanged,
    StorageError,
    StoreUnavailable,
    WriteUncertain,
)
from chalicelib.storage.record_port import Applied, Failed, RecordStore, after, found
from chalicelib.storage.records import NotTaken, Taken
from chalicelib.storage.writers import Writers

BudgetRecords: TypeAlias = RecordStore[BudgetKey, BudgetSnapshot]


class Budgets:
    """Budgets above the session, in fixed windows (`ports.BudgetCounters`), on one
    backend's records; decides nothing about policy."""

    def __init__(self, records: BudgetRecords) -> None:
        self._records = records
        # The window each budget and category counted when this container last took
        # from it: which of the two take forms to try first. A hint, never a decision.
        self._windows: dict[tuple[BudgetKey, str], int] = {}
        self._writers = Writers()
        # Writers each budget showed that were not seen lately: the next write to it
        # drops them (`quota.writes.stale`).
        self._stale: dict[BudgetKey, tuple[str, ...]] = {}

    def _write(
        self,
        key: BudgetKey,
        change: Change,
        rule: Condition | None,
        doing: str,
        write: WriteId | None = None,
        before: bool = False,
    ) -> Applied[BudgetSnapshot] | Failed[BudgetSnapshot]:
        """One write; `write`: its own number, which the rule names (`rules.unwritten`).

        Raises:
            StorageError: the store failed.
        """
        if write is not None:
            dropped = tuple(w for w in self._stale.pop(key, ()) if w != write.writer)
            change = written(change, write, dropped)
        out = self._records.write(key, change, rule, doing, before)
        if write is not None and isinstance(out, Applied) and out.record is not None:
            dropped = stale(out.record.writes, write.seq // PER_MS, write.writer)
            if dropped:
                if len(self._stale) > 10_000:
                    self._stale.clear()
                self._stale[key] = dropped
        return out

    def take(self, key: BudgetKey, spend: Spend) -> Taken | NotTaken:
        """Count `spend.units` calls if not suspended and they fit under the limit in the
        current window. A record counts one window per category: the first take of a
        later window starts it again (a second write, once per window, unless this
        container saw the record in an earlier window last).

        Raises:
            WriteUncertain: no answer came; the take may stand (`give_back_if_taken`).
            StorageError: the store failed.
        """
        try:
            return self._take(key, spend)
        except StorageError as exc:
            raise self._uncertain(exc) from exc

    def _uncertain(self, exc: StorageError) -> StorageError:
        """A failed write as its caller must see it: `WriteUncertain` when the store may
        have applied it (the writer then retired), else as it was."""
        if not isinstance(exc, StoreUnavailable) or exc.throttled:
            return exc  # refused outright, or throttled: nothing was written
        if isinstance(exc, WriteUncertain):
            return exc
        write = self._writers.retire()
        return WriteUncertain(exc.doing, write, exc.retry_after_seconds)

    def _take(self, key: BudgetKey, spend: Spend) -> Taken | NotTaken:
        doing = f"counting a call against the {key.scope.value} budget"
        counted = (key, spend.category)
        fresh = self._windows.get(counted, -1) < spend.window_start_ms
        seen: BudgetSnapshot | None = None
        for _ in range(3):
            write = self._writers.next(spend.now_ms)
            change, rule = budget_taken(spend, fresh), budget_take(spend, write, fresh)
            out = self._write(key, change, rule, doing, write)
            if isinstance(out, Applied):
                self._windows[counted] = spend.window_start_ms
                return Taken(after(out))
            seen = out.old
            if seen is not None and applied(seen.writes, write):
                self._windows[counted] = spend.window_start_ms
                return Taken(seen)  # this very take, sent again by the store's client
            window = seen.windows.get(spend.category) if seen is not None else None
            later = window is None or window < spend.window_start_ms
            if (seen is not None and seen.suspended) or fresh == later:
                return NotTaken(seen)  # suspended, spent, or the units do not fit
            fresh = later  # the other case: the record counts another window than thought
        return NotTaken(seen)

    def give_back(self, key: BudgetKey, spend: Spend, again: WriteId | None = None) -> None:
        """Undo `spend.units` calls of this window; nothing if it was reset meanwhile
        (nor twice when the store's client, or the caller with `again`, sends it again).

        Raises:
            WriteUncertain: no answer came; send it again under the error's `write`.
            StorageError: the store failed.
        """
        doing = f"giving back calls to the {key.scope.value} budget"
        write = again or self._writers.next(spend.now_ms)
        rule = budget_give_back(spend, write)
        try:
            self._write(key, budget_given_back(spend), rule, doing, write)
        except StorageError as exc:
            if again is not None and isinstance(exc, StoreUnavailable) and not exc.throttled:
                raise WriteUncertain(exc.doing, again, exc.retry_after_seconds) from exc
            raise self._uncertain(exc) from exc

    def give_back_if_taken(self, key: BudgetKey, spend: Spend, take: WriteId) -> None:
        """Undo a take whose answer never came if the record applied it (its writer's
        number there is the take's), else mark it never to apply (the writer's next
        number, which the take's rule then fails on): both under `given_back(take)`, so
        either applies once, and a take that lands between the two is given back.

        Raises:
            StorageError: the store failed.
        """
        doing = f"giving back an unanswered count to the {key.scope.value} budget"
        write = given_back(take)
        for _ in range(3):
            rule = budget_give_back_taken(spend, take)
            out = self._write(key, budget_given_back(spend), rule, doing, write)
            if isinstance(out, Applied):
                return
            if out.old is not None and applied(out.old.writes, take):
                return  # given back already, or reset since: nothing is owed
            if isinstance(self._write(key, Change(), NotWrittenBy(take), doing, write), Applied):
                return  # the take never applied, and now never will
            # The take landed meanwhile: give it back.

    def note_refusal(self, key: BudgetKey, spend: Spend) -> bool:
        """Whether this is the first refusal at this window and limit.

        Raises:
            StorageError: the store failed.
        """
        doing = f"recording a refusal of the {key.scope.value} budget"
        old = _before(self._write(key, budget_marked(spend), None, doing, before=True))
        return first_at(old.marks.get(spend.category) if old else None, spend)

    def note_streak(
        self,
        key: BudgetKey,
        category: str,
        now_ms: int,
        allowed_since_ms: int,
        spend: Spend | None = None,
        refusals: int = 1,
    ) -> tuple[int, bool]:
        """`BudgetCounters.note_streak`: one write, the old streak read from the record
        as it was before it.

        Raises:
            StorageError: the store failed.
        """
        doing = f"counting a refusal in the {key.scope.value}'s streak"
        for round_ in range(3):
            write = self._writers.next(now_ms)
            goes_on = streak_noted(category, now_ms, refusals, True, spend)
            rule = streak_goes_on(category, allowed_since_ms, write)
            out = self._write(key, goes_on, rule, doing, write, before=True)
            if isinstance(out, Applied):
                old = out.record
                streak = (old.streak(category) if old else 0) + refusals
                break
            if out.old is not None and applied(out.old.writes, write):
                # This very write, sent again by the store's client: counted once. Whether
                # it was the first refusal there is not known now: not (no second email).
                return out.old.streak(category), False
            again = self._writers.next(now_ms)
            restart = streak_noted(category, now_ms, refusals, False, spend)
            # A last try restarts it whatever came meanwhile (never more than counted).
            rule = streak_restarts(category, allowed_since_ms, again)
            if round_ == 2:
                rule = all_of(*unwritten(again))
            out = self._write(key, restart, rule, doing, again, True)
            if isinstance(out, Applied):
                old, streak = out.record, refusals
                break
            if out.old is not None and applied(out.old.writes, again):
                return refusals, False  # this very restart, sent again: the streak is its own
            # Refused there again meanwhile: that refusal restarted it; this one adds.
        else:
            return refusals, False  # unreachable: a last restart fails only if applied
        first = spend is not None and first_at(old.marks.get(category) if old else None, spend)
        return streak, first

    def end_streak(self, key: BudgetKey, category: str, now_ms: int) -> None:
        """A call of this principal in `category` was allowed at every scope: its streak
        there ends, unless it was refused there again since.

        Raises:
            StorageError: the store failed.
        """
        doing = f"ending the {key.scope.value}'s streak of refusals"
        self._write(key, streak_ended(category), streak_ends(category, now_ms), doing)

    def get(self, key: BudgetKey) -> BudgetSnapshot | None:
        """The budget as stored, or None.

        Raises:
            StorageError: the store failed.
        """
        return self._records.read(key)

    def raise_limit(self, key: BudgetKey, category: str, new_limit: int) -> BudgetSnapshot:
        """Raise a category's limit, never below a raise set meanwhile.

        Raises:
            RecordChanged: a higher raise was set meanwhile.
            StorageError: the store failed.
        """
        doing = f"raising the {key.scope.value} budget"
        change, rule = budget_raised(category, new_limit), budget_raise(category, new_limit)
        out = self._write(key, change, rule, doing)
        if isinstance(out, Failed):
            raise RecordChanged(doing)
        return after(out)

    def suspend(self, key: BudgetKey, reason: str) -> tuple[BudgetSnapshot, bool]:
        """Suspend (creating the budget if unseen); returns it and whether it was newly
        suspended.

        Raises:
            StorageError: the store failed.
        """
        doing = f"suspending the {key.scope.value} budget"
        old = _before(self._write(key, budget_suspended(reason), None, doing, before=True))
        now = replace(old or BudgetSnapshot(), suspended_reason=reason)
        return now, old is None or not old.suspended

    def resume(self, key: BudgetKey) -> BudgetSnapshot:
        """Lift a suspension and every category's refusal streak.

        Raises:
            RecordNotFound: the budget does not exist.
            StorageError: the store failed.
        """
        doing = f"resuming the {key.scope.value} budget"
        return found(self._write(key, BUDGET_RESUMED, BudgetExists(), doing), doing)

    def reset(self, key: BudgetKey) -> BudgetSnapshot:
        """Zero the counters of every window and every refusal streak; raises and
        suspension stay.

        Raises:
            RecordNotFound: the budget does not exist.
            StorageError: the store failed.
        """
        doing = f"resetting the {key.scope.value} budget"
        return found(self._write(key, BUDGET_RESET, BudgetExists(), doing), doing)


def _before(out: Applied[BudgetSnapshot] | Failed[BudgetSnapshot]) -> BudgetSnapshot | None:
    """The record before a write on no condition (which always applies)."""
    assert isinstance(out, Applied), "a write on no condition applies"
    return out.record
