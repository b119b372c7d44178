"""The budgets above the session (a principal's, the tenant's) on DynamoDB, in the
counters table: one conditional UpdateItem per call counted.


Item layout: `budget_items`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from chalicelib.quota.changes import (
    BUDGET_RESET,
    BUDGET_RESUMED,
    Change,
    budget_given_back,
    budget_marked,
    budget_raised,
    budget_suspended,
    budget_taken,
    streak_ended,
    streak_noted,
    written,
)
from chalicelib.quota.core import BudgetKey, BudgetSnapshot, Spend
from chalicelib.quota.facts import (
    BudgetExists,
    Condition,
    CountsNoLaterWindow,
    CountsWindow,
    NotWrittenBy,
    all_of,
)
from chalicelib.quota.rules import (
    budget_give_back,
    budget_give_back_taken,
    budget_raise,
    budget_take,
    streak_ends,
    streak_goes_on,
    unwritten,
)
from chalicelib.quota.writes import PER_MS, WriteId, applied, given_back, stale
from chalicelib.storage.dynamodb import updates
from chalicelib.storage.dynamodb.budget_items import (
    BUDGET,
    COUNT_PREFIX,
    EXPIRES,
    NAMES,
    OLD_COUNT_PREFIX,
    OLD_STREAK,
    SUSPENDED,
    WINDOW_PREFIX,
    first_refusal,
    held,
    item_key,
    snapshot_from_item,
    window_of,
)
from chalicelib.storage.dynamodb.changes import merged, render_change
from chalicelib.storage.dynamodb.conditions import Form, Rendered, render
from chalicelib.storage.dynamodb.layout import (
    STREAK_PREFIX,
)
from chalicelib.storage.dynamodb.updates import ConditionFailed, s
from chalicelib.storage.ports import (
    NotTaken,
    RecordChanged,
    RecordNotFound,
    StorageError,
    StoreUnavailable,
    Taken,
    WriteUncertain,
)
from chalicelib.storage.writers import Writers

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

# A take's condition is the core's rule (`quota.rules.budget_take`), rendered in one of
# two forms: in the window the item counts, or in a later one, which starts the count
# again. Several calls at once (a lease) under a raise: a second try tied to the raise.
THIS_WINDOW = frozenset({CountsNoLaterWindow})  # the form that leaves out a new window
NEW_WINDOW = frozenset({CountsWindow})
_EXISTS = BudgetExists()


class BudgetStore:
    """Counts calls against principal and tenant budgets; decides nothing about policy."""

    def __init__(self, client: DynamoDBClient, table_name: str) -> None:
        self._client = client
        self._table = table_name
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
        returns: str = "ALL_NEW",
        old_on_failure: bool = False,
        form: Form | None = None,
        cleared: tuple[tuple[str, ...], tuple[str, ...]] = ((), ()),
        write: WriteId | None = None,
    ) -> dict[str, Any]:
        """One UpdateItem: the core's change, on the core's rule if any. `cleared`: the
        categories the item holds, and attributes of an older layout, for a `clear`.
        `write`: the write's own number, which the rule names (`rules.unwritten`).

        Raises:
            ConditionFailed: the rule failed.
            StorageError: the store failed.
        """
        categories, removing = cleared
        if write is not None:
            dropped = tuple(w for w in self._stale.pop(key, ()) if w != write.writer)
            change = written(change, write, dropped)
        update = render_change(change, categories, None, BUDGET, removing)
        rendered = render(rule, form) if rule is not None else Rendered("")
        item = updates.update(
            self._client,
            self._table,
            item_key(key),
            update.expression,
            rendered.expression,
            merged(NAMES, update.names, rendered.names),
            merged(update.values, rendered.values),
            doing,
            returns,
            old_on_failure,
        )
        if write is not None and item:
            self._learn(key, snapshot_from_item(item), write)
        return item

    def _learn(self, key: BudgetKey, seen: BudgetSnapshot, write: WriteId) -> None:
        """Remember the writers `seen` shows that the next write to `key` drops."""
        now_ms = write.seq // PER_MS
        dropped = stale(seen.writes, now_ms, write.writer)
        if dropped:
            if len(self._stale) > 10_000:
                self._stale.clear()
            self._stale[key] = dropped

    def _old(self, key: BudgetKey, failed: ConditionFailed, doing: str) -> Mapping[str, Any]:
        """The item a failed write saw: returned with the failure, or read."""
        return failed.old_item or updates.get(self._client, self._table, item_key(key), doing) or {}

    def take(self, key: BudgetKey, spend: Spend) -> Taken | NotTaken:
        """Count `spend.units` calls if not suspended and they fit under the limit in the
        current window. The item counts one window per category: the first take of a
        later window starts it again (a second request, once per window, unless this
        container saw the item in an earlier window last).

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
        fresh = self._windows.get((key, spend.category), -1) < spend.window_start_ms
        seen: BudgetSnapshot | None = None
        for _ in range(3):
            write = self._writers.next(spend.now_ms)
            rule = budget_take(spend, write)
            try:
                if fresh:
                    change = budget_taken(spend, fresh=True)
                    form = Form(NEW_WINDOW)
                    item = self._write(key, change, rule, doing, "ALL_NEW", True, form, write=write)
                else:
                    item = self._same(key, spend, write, doing)
            except ConditionFailed as failed:
                old = self._old(key, failed, doing)
                seen = snapshot_from_item(old) if old else None
                if seen is not None and applied(seen.writes, write):
                    self._windows[(key, spend.category)] = spend.window_start_ms
                    return Taken(seen)  # this very take, sent again by the store's client
                window = window_of(old, spend.category)
                later = window is None or window < spend.window_start_ms
                if (seen is not None and seen.suspended) or fresh == later:
                    return NotTaken(seen)  # suspended, spent, or the units do not fit
                fresh = later  # the other form: the item counts another window than thought
                continue
            self._windows[(key, spend.category)] = spend.window_start_ms
            return Taken(snapshot_from_item(item))
        return NotTaken(seen)

    def _same(self, key: BudgetKey, spend: Spend, write: WriteId, doing: str) -> dict[str, Any]:
        """A take in the window the item counts (a lease under a raise: a second try).

        Raises:
            ConditionFailed: spent, suspended, the item counts another window, or the
                write was applied already.
        """
        change = budget_taken(spend, fresh=False)
        rule = budget_take(spend, write)
        try:
            form = Form(THIS_WINDOW)
            return self._write(key, change, rule, doing, "ALL_NEW", True, form, write=write)
        except ConditionFailed as failed:
            seen = snapshot_from_item(failed.old_item) if failed.old_item else None
            raised = seen.raised.get(spend.category, 0) if seen else 0
            if spend.units == 1 or raised <= spend.limit or (seen and applied(seen.writes, write)):
                raise
            again = self._writers.next(spend.now_ms)
            tied = Form(THIS_WINDOW, raise_as_read=raised)
            try:
                return self._write(
                    key,
                    change,
                    budget_take(spend, again),
                    doing,
                    "ALL_NEW",
                    True,
                    tied,
                    write=again,
                )
            except ConditionFailed as second:
                old = self._old(key, second, doing)
                if old and applied(snapshot_from_item(old).writes, again):
                    return dict(old)  # this very take, sent again by the store's client
                raise

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
            self._write(key, budget_given_back(spend), rule, doing, "NONE", write=write)
        except ConditionFailed:
            return
        except StorageError as exc:
            if again is not None and isinstance(exc, StoreUnavailable) and not exc.throttled:
                raise WriteUncertain(exc.doing, again, exc.retry_after_seconds) from exc
            raise self._uncertain(exc) from exc

    def give_back_if_taken(self, key: BudgetKey, spend: Spend, take: WriteId) -> None:
        """Undo a take whose answer never came if the item applied it (its writer's
        number there is the take's), else mark it never to apply (the writer's next
        number, which the take's rule then fails on): both under `given_back(take)`, so
        either applies once, and a take that lands between the two is given back.

        Raises:
            StorageError: the store failed.
        """
        doing = f"giving back an unanswered count to the {key.scope.value} budget"
        write = given_back(take)
        for _ in range(3):
            try:
                rule = budget_give_back_taken(spend, take)
                self._write(key, budget_given_back(spend), rule, doing, "NONE", write=write)
                return
            except ConditionFailed as failed:
                old = self._old(key, failed, doing)
                if old and applied(snapshot_from_item(old).writes, take):
                    return  # given back already, or reset since: nothing is owed
            try:
                self._write(key, Change(), all_of(NotWrittenBy(take)), doing, "NONE", write=write)
                return  # the take never applied, and now never will
            except ConditionFailed:
                continue  # the take landed meanwhile: give it back

    def note_refusal(self, key: BudgetKey, spend: Spend) -> bool:
        """Whether this is the first refusal at this window and limit.

        Raises:
            StorageError: the store failed.
        """
        doing = f"recording a refusal of the {key.scope.value} budget"
        # ALL_OLD, not UPDATED_OLD: an attribute SET to the value it had may be left out.
        old = self._write(key, budget_marked(spend), None, doing, "ALL_OLD")
        return first_refusal(old, spend)

    def note_streak(
        self,
        key: BudgetKey,
        category: str,
        now_ms: int,
        allowed_since_ms: int,
        spend: Spend | None = None,
        refusals: int = 1,
    ) -> tuple[int, bool]:
        """`BudgetCounters.note_streak`: one UpdateItem, the old streak read from ALL_OLD.

        Raises:
            StorageError: the store failed.
        """
        doing = f"counting a refusal in the {key.scope.value}'s streak"
        streak_of = STREAK_PREFIX + category
        # ALL_OLD, not UPDATED_OLD: an attribute SET to the value it had may be left out.
        write = self._writers.next(now_ms)
        try:
            goes_on = streak_noted(category, now_ms, refusals, True, spend)
            rule = streak_goes_on(category, allowed_since_ms, write)
            old = self._write(key, goes_on, rule, doing, "ALL_OLD", True, write=write)
            streak = int(old.get(streak_of, {"N": "0"})["N"]) + refusals
        except ConditionFailed as failed:
            seen = self._old(key, failed, doing)
            if seen and applied(snapshot_from_item(seen).writes, write):
                # This very write, sent again by the store's client: counted once. Whether
                # it was the first refusal there is not known now: not (no second email).
                return int(seen.get(streak_of, {"N": "0"})["N"]), False
            again = self._writers.next(now_ms)
            restart = streak_noted(category, now_ms, refusals, False, spend)
            rule = all_of(*unwritten(again))
            try:
                old = self._write(key, restart, rule, doing, "ALL_OLD", True, write=again)
            except ConditionFailed:
                return refusals, False  # this very restart, sent again: the streak is its own
            streak = refusals
        return streak, spend is not None and first_refusal(old, spend)

    def end_streak(self, key: BudgetKey, category: str, now_ms: int) -> None:
        """A call of this principal in `category` was allowed at every scope: its streak
        there ends.

        Raises:
            StorageError: the store failed.
        """
        doing = f"ending the {key.scope.value}'s streak of refusals"
        rule = streak_ends(category, now_ms)
        try:
            self._write(key, streak_ended(category), rule, doing, "NONE")
        except ConditionFailed:
            return  # refused again since: that refusal's streak stands

    def get(self, key: BudgetKey) -> BudgetSnapshot | None:
        """The budget as stored, or None.

        Raises:
            StorageError: the store failed.
        """
        doing = f"reading the {key.scope.value} budget"
        item = updates.get(self._client, self._table, item_key(key), doing)
        return snapshot_from_item(item) if item else None

    def raise_limit(self, key: BudgetKey, category: str, new_limit: int) -> BudgetSnapshot:
        """Raise a category's limit, never below a raise set meanwhile.

        Raises:
            RecordChanged: a higher raise was set meanwhile.
            StorageError: the store failed.
        """
        doing = f"raising the {key.scope.value} budget"
        change, rule = budget_raised(category, new_limit), budget_raise(category, new_limit)
        try:
            return snapshot_from_item(self._write(key, change, rule, doing))
        except ConditionFailed as exc:
            raise RecordChanged(doing) from exc

    def suspend(self, key: BudgetKey, reason: str) -> tuple[BudgetSnapshot, bool]:
        """Suspend; returns the budget and whether it was newly suspended.

        Raises:
            StorageError: the store failed.
        """
        doing = f"suspending the {key.scope.value} budget"
        old = self._write(key, budget_suspended(reason), None, doing, "ALL_OLD")
        now = {k: v for k, v in old.items() if k != EXPIRES}
        now[SUSPENDED] = s(reason)
        return snapshot_from_item(now), SUSPENDED not in old

    def resume(self, key: BudgetKey) -> BudgetSnapshot:
        """Lift a suspension and every category's refusal streak.

        Raises:
            RecordNotFound: the budget does not exist.
            StorageError: the store failed.
        """
        doing = f"resuming the {key.scope.value} budget"
        item = updates.get(self._client, self._table, item_key(key), doing)
        if item is None:
            raise RecordNotFound(doing)
        # The item names the categories it keeps a streak in (and a streak of before).
        old = tuple(name for name in OLD_STREAK if name in item)
        cleared = (held(item, STREAK_PREFIX), old)
        try:
            written = self._write(key, BUDGET_RESUMED, _EXISTS, doing, cleared=cleared)
        except ConditionFailed as exc:
            raise RecordNotFound(doing) from exc
        return snapshot_from_item(written)

    def reset(self, key: BudgetKey) -> BudgetSnapshot:
        """Zero the counters of every window; raises and suspension stay.

        Raises:
            RecordNotFound: the budget does not exist.
            StorageError: the store failed.
        """
        doing = f"resetting the {key.scope.value} budget"
        item = updates.get(self._client, self._table, item_key(key), doing)
        if item is None:
            raise RecordNotFound(doing)
        # The item names the categories it counts or keeps a streak in (and counts and
        # a streak of an older layout).
        categories = held(item, COUNT_PREFIX, WINDOW_PREFIX, STREAK_PREFIX)
        old = tuple(sorted(name for name in item if name.startswith(OLD_COUNT_PREFIX)))
        old += tuple(name for name in OLD_STREAK if name in item)
        if not categories and not old:
            return snapshot_from_item(item)  # nothing counted, no streak: nothing to write
        cleared = (categories, old)
        try:
            written = self._write(key, BUDGET_RESET, _EXISTS, doing, cleared=cleared)
        except ConditionFailed as exc:
            raise RecordNotFound(doing) from exc
        return snapshot_from_item(written)
