"""The budgets above the session (a principal's, the tenant's) on DynamoDB, in the
counters table: the narrow pair (`record_port.RecordStore`), each write one conditional
UpdateItem (the rule rendered by `conditions`, the change by `changes`). What each write
is, and what its failure means, is `storage.budgets`'.

Item layout: `budget_items`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from chalicelib.quota.changes import Change, Slot
from chalicelib.quota.core import BudgetKey, BudgetSnapshot
from chalicelib.quota.facts import Condition, CountsNoLaterWindow, CountsWindow, facts
from chalicelib.storage.budgets import Budgets
from chalicelib.storage.dynamodb import updates
from chalicelib.storage.dynamodb.budget_items import (
    BUDGET,
    NAMES,
    OLD_COUNT_PREFIX,
    OLD_STREAK,
    held,
    item_key,
    snapshot_from_item,
)
from chalicelib.storage.dynamodb.changes import merged, render_change
from chalicelib.storage.dynamodb.conditions import Form, Rendered, raise_form, render
from chalicelib.storage.dynamodb.updates import ConditionFailed, Table
from chalicelib.storage.record_port import Applied, Failed

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

# A take's rule says one of two cases (`rules.budget_take(fresh=...)`): the window the
# item counts, or a later one, which starts the count again (only the units must fit).
NEW_WINDOW = frozenset({CountsWindow})


class BudgetItems(Table):
    """Budget items: read one, or apply one change under one condition."""

    def _get(self, key: BudgetKey, doing: str) -> dict[str, Any] | None:
        return updates.get(self._client, self._table, item_key(key), doing)

    def read(self, key: BudgetKey) -> BudgetSnapshot | None:
        """The budget as stored, or None.

        Raises:
            StorageError: the store failed.
        """
        item = self._get(key, f"reading the {key.scope.value} budget")
        return snapshot_from_item(item) if item else None

    def write(
        self,
        key: BudgetKey,
        change: Change,
        rule: Condition | None,
        doing: str,
        before: bool = False,
    ) -> Applied[BudgetSnapshot] | Failed[BudgetSnapshot]:
        """One UpdateItem (a clear reads the item first, for the categories it holds; a
        lease under a raise takes a second, tied to the raise as read).

        Raises:
            StorageError: the store failed.
        """
        categories: tuple[str, ...] = ()
        removing: tuple[str, ...] = ()
        item: Mapping[str, Any] | None = None
        if change.clear:
            # The item names the categories it holds, and attributes of an older layout
            # (per-window counts, one streak), which a clear removes too.
            item = self._get(key, doing) or {}
            categories = held(item, *(BUDGET.prefixes[slot][1] for slot in change.clear))
            if Slot.COUNTS in change.clear:
                removing = tuple(sorted(n for n in item if n.startswith(OLD_COUNT_PREFIX)))
            if Slot.STREAKS in change.clear:
                removing += tuple(name for name in OLD_STREAK if name in item)
        update = render_change(change, categories, None, BUDGET, removing)
        if not update.expression:  # nothing to clear: nothing to write
            seen = snapshot_from_item(item) if item else None
            return Applied(seen) if rule is None or rule.holds(seen) else Failed(seen)
        kinds = {type(fact) for fact in facts(rule)} if rule is not None else set()
        fresh = CountsNoLaterWindow in kinds and CountsWindow not in kinds
        form = Form(NEW_WINDOW if fresh else frozenset())
        try:
            return self._update(key, update, rule, form, doing, before)
        except ConditionFailed as failed:
            old = failed.old_item or self._get(key, doing)
            seen = snapshot_from_item(old) if old else None
            tied = raise_form(rule, form, seen) if rule is not None else None
            if tied is None:
                return Failed(seen)
        try:
            return self._update(key, update, rule, tied, doing, before)
        except ConditionFailed as failed:
            old = failed.old_item or self._get(key, doing)
            return Failed(snapshot_from_item(old) if old else None)

    def _update(
        self,
        key: BudgetKey,
        update: Rendered,
        rule: Condition | None,
        form: Form,
        doing: str,
        before: bool,
    ) -> Applied[BudgetSnapshot]:
        """Raises: ConditionFailed, StorageError."""
        rendered = render(rule, form) if rule is not None else Rendered("")
        item: Mapping[str, Any] = updates.update(
            self._client,
            self._table,
            item_key(key),
            update.expression,
            rendered.expression,
            merged(NAMES, update.names, rendered.names),
            merged(update.values, rendered.values),
            doing,
            "ALL_OLD" if before else "ALL_NEW",
            old_on_failure=True,
        )
        return Applied(snapshot_from_item(item) if item else None)


class BudgetStore(Budgets):
    """The budgets port (`storage.budgets`) on DynamoDB items."""

    def __init__(self, client: DynamoDBClient, table_name: str) -> None:
        super().__init__(BudgetItems(client, table_name))
