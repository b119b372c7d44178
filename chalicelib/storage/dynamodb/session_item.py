"""The requests every write to a session's item makes (the item layout is in `layout`):
one UpdateItem, a strongly consistent read, the old item of a failed condition, and the
trim of the last calls."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from chalicelib.quota.changes import Change
from chalicelib.quota.core import (
    CallRecord,
)
from chalicelib.storage.dynamodb import updates
from chalicelib.storage.dynamodb.changes import merged, render_change
from chalicelib.storage.dynamodb.codec import (
    encode_call,
    stored_id,
)
from chalicelib.storage.dynamodb.conditions import Rendered
from chalicelib.storage.dynamodb.expressions import (
    BASE_NAMES,
    TRIM_CONDITION,
)
from chalicelib.storage.dynamodb.layout import CALL_IDS, PK
from chalicelib.storage.dynamodb.tails import Tails
from chalicelib.storage.dynamodb.updates import ConditionFailed as _ConditionFailed
from chalicelib.storage.dynamodb.updates import Table
from chalicelib.storage.dynamodb.updates import n as _n
from chalicelib.storage.dynamodb.updates import s as _s
from chalicelib.storage.ports import (
    StorageError,
)

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient


_log = logging.getLogger(__name__)


class SessionItems(Table):
    """One session's item: the requests every write to it makes; decides nothing."""

    def __init__(
        self,
        client: DynamoDBClient,
        table_name: str,
        categories: Iterable[str],
        keep_calls: int = 10,
    ) -> None:
        super().__init__(client, table_name)
        self._categories = tuple(categories)
        self._keep = max(1, keep_calls)
        self._batch = max(1, keep_calls // 2)
        self._tails = Tails()

    def _write(
        self,
        key: str,
        update: Rendered,
        rule: Rendered,
        doing: str,
        returns: str = "ALL_NEW",
        old_on_failure: bool = False,
        also: str = "",
    ) -> dict[str, Any]:
        """One UpdateItem: a change rendered, on its rule rendered (and `also`: that the
        lists still end as this container knows them).

        Raises:
            _ConditionFailed: the condition failed.
            StorageError: the store failed.
        """
        condition = " AND ".join(part for part in (rule.expression, also) if part)
        names = merged(update.names, rule.names)
        values = merged(update.values, rule.values)
        return updates.update(
            self._client,
            self._table,
            {PK: _s(key)},
            update.expression,
            condition,
            names,
            values,
            doing,
            returns,
            old_on_failure,
        )

    def _item(self, key: str, doing: str) -> dict[str, Any] | None:
        """Read an item (strongly consistent), or None.

        Raises:
            StorageError: the store failed.
        """
        return updates.get(self._client, self._table, {PK: _s(key)}, doing)

    def _old(self, failed: _ConditionFailed, key: str, doing: str) -> dict[str, Any] | None:
        """The item a failed condition saw: returned with the failure, or read (dynalite
        ignores ReturnValuesOnConditionCheckFailure)."""
        old = dict(failed.old_item) if failed.old_item else self._item(key, doing)
        self._tails.learn(key, old)
        return old

    def _change(
        self, change: Change, calls: str | None, list_values: Mapping[str, Any] | None = None
    ) -> Rendered:
        """The change rendered, with the values of its record in the last calls."""
        update = render_change(change, self._categories, calls)
        if change.record is not None:
            update.values.update(self._record_values(change.record))
        if list_values:
            update.values.update(list_values)
        return update

    @staticmethod
    def _record_values(record: CallRecord) -> dict[str, Any]:
        """The values that add `record` to the last calls (`changes.APPEND_CALL`, ...)."""
        return {
            ":rec": {"L": [_s(encode_call(record))]},
            ":cidl": {"L": [_s(stored_id(record))]},
            ":empty": {"L": []},
        }

    def _maybe_trim(self, key: str, length: int) -> None:
        """Drop the oldest entries of the last calls once the list is a batch or more past
        `keep`, back to `keep`.

        The condition (the list is still at least `length` long) lets one of several
        writers that saw the same or overlapping lengths trim, never below `keep`. A failed
        trim is harmless (the next append past the batch trims again), so it is logged, not
        raised.
        """
        over = length - self._keep
        if over < self._batch:
            return
        positions = range(over)
        removals = [f"#calls[{i}]" for i in positions] + [f"#ids[{i}]" for i in positions]
        try:
            self._write(
                key,
                Rendered("REMOVE " + ", ".join(removals), dict(BASE_NAMES), {":min": _n(length)}),
                Rendered(TRIM_CONDITION),
                "trimming the last calls",
                returns="NONE",
            )
        except _ConditionFailed:
            return  # another writer trimmed first, or the session was reset
        except StorageError as exc:
            _log.warning("last-calls trim failed while %s", exc.doing)
        finally:
            self._tails.put(key, None)

    def _appended(self, key: str, item: Mapping[str, Any]) -> None:
        """After a write that appended to the last calls, with the item it returned: its
        lists learnt, and trimmed once a batch past `keep`."""
        self._tails.learn(key, item)
        self._maybe_trim(key, len(item.get(CALL_IDS, {}).get("L", [])))
