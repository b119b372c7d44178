"""How the DynamoDB adapters make their requests: each request is a thunk their own module
calls (so the scan of the code still sees which table each call acts on), made here with
its errors translated (`storage.faults`), a failed condition raised as `ConditionFailed`
with the old item, a listing's pages followed, and a put that never overwrites said once
(`Table._as_new`). The counters-table adapters (session counters, budgets, links, results)
share one conditional UpdateItem and one GetItem."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from functools import partial
from typing import TYPE_CHECKING, Any, TypeVar

from botocore.exceptions import BotoCoreError, ClientError

from chalicelib.storage.faults import error_code, translate

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

_PLACEHOLDER = re.compile(r"[#:][A-Za-z0-9_]+")
NEW_ITEM = "attribute_not_exists(#key)"
R = TypeVar("R")


class ConditionFailed(Exception):
    """The update's condition failed; carries the old item when the store returned it."""

    def __init__(self, old_item: Mapping[str, Any] | None) -> None:
        super().__init__("conditional check failed")
        self.old_item = old_item


class Table:
    """An adapter of one DynamoDB table: the client it speaks through and the table's name."""

    def __init__(self, client: DynamoDBClient, table_name: str) -> None:
        self._client = client
        self._table = table_name

    def _as_new(self, item: Mapping[str, Any], key: str) -> dict[str, Any]:
        """The arguments of a PutItem that stores `item` as new: it fails its condition
        if an item with the same key exists (`key`: an attribute of the table's key)."""
        return {
            "TableName": self._table,
            "Item": dict(item),
            "ConditionExpression": NEW_ITEM,
            "ExpressionAttributeNames": {"#key": key},
        }

    def _query(
        self,
        key_condition: str,
        names: Mapping[str, str],
        values: Mapping[str, Any],
        start: Mapping[str, Any],
        consistent: bool = False,
    ) -> dict[str, Any]:
        """The arguments of one page of a Query of this table (`start`: as `all_items`
        gives it), every name and value aliased; `consistent` reads strongly."""
        args: dict[str, Any] = {
            "TableName": self._table,
            "KeyConditionExpression": key_condition,
            "ExpressionAttributeNames": dict(names),
            "ExpressionAttributeValues": dict(values),
            **start,
        }
        if consistent:
            args["ConsistentRead"] = True
        return args


def call(request: Callable[[], R], doing: str) -> R:
    """Make one request (a failed condition, if it has one, is a fault like any other).

    Raises:
        StorageError: the store failed.
    """
    try:
        return request()
    except (ClientError, BotoCoreError) as exc:
        raise translate(exc, doing) from exc


def conditional(request: Callable[[], R], doing: str) -> R:
    """Make one conditional request.

    Raises:
        ConditionFailed: the condition failed (with the old item if the store returned it).
        StorageError: the store failed.
    """
    try:
        return request()
    except ClientError as exc:
        if error_code(exc) == "ConditionalCheckFailedException":
            item: Any = exc.response.get("Item")
            raise ConditionFailed(item) from exc
        raise translate(exc, doing) from exc
    except BotoCoreError as exc:
        raise translate(exc, doing) from exc


def all_items(
    request: Callable[[dict[str, Any]], Mapping[str, Any]], doing: str
) -> list[dict[str, Any]]:
    """Every item of a Query or a Scan, page after page: `request` makes one page from the
    start key it is given (none for the first).

    Raises:
        StorageError: the store failed.
    """
    items: list[dict[str, Any]] = []
    start: dict[str, Any] = {}
    while True:
        page = call(partial(request, start), doing)
        items += [dict(item) for item in page.get("Items", [])]
        last = page.get("LastEvaluatedKey")
        if not last:
            return items
        start = {"ExclusiveStartKey": last}


def only_used(
    expressions: Iterable[str], names: Mapping[str, str], values: Mapping[str, Any]
) -> dict[str, Any]:
    """Names and values that the expressions use: DynamoDB rejects unused ones."""
    used = set(_PLACEHOLDER.findall(" ".join(expressions)))
    out: dict[str, Any] = {
        "ExpressionAttributeNames": {k: v for k, v in names.items() if k in used}
    }
    kept = {k: v for k, v in values.items() if k in used}
    if kept:
        out["ExpressionAttributeValues"] = kept
    return out


def s(value: str) -> dict[str, Any]:
    """A DynamoDB string value."""
    return {"S": value}


def n(value: int) -> dict[str, Any]:
    """A DynamoDB number value."""
    return {"N": str(value)}


def update(
    client: DynamoDBClient,
    table: str,
    key: Mapping[str, Any],
    expression: str,
    condition: str,
    names: Mapping[str, str],
    values: Mapping[str, Any],
    doing: str,
    returns: str = "ALL_NEW",
    old_on_failure: bool = False,
) -> dict[str, Any]:
    """One UpdateItem; returns the attributes `returns` asks for.

    Raises:
        ConditionFailed: the condition failed.
        StorageError: the store failed.
    """
    kwargs: dict[str, Any] = only_used((expression, condition), names, values)
    if condition:
        kwargs["ConditionExpression"] = condition
    if old_on_failure:
        kwargs["ReturnValuesOnConditionCheckFailure"] = "ALL_OLD"
    response = conditional(
        lambda: client.update_item(
            TableName=table,
            Key=dict(key),
            UpdateExpression=expression,
            ReturnValues=returns,  # type: ignore[arg-type]
            **kwargs,
        ),
        doing,
    )
    return dict(response.get("Attributes", {}))


def get(
    client: DynamoDBClient, table: str, key: Mapping[str, Any], doing: str
) -> dict[str, Any] | None:
    """A strongly consistent GetItem, or None.

    Raises:
        StorageError: the store failed.
    """
    response = call(
        lambda: client.get_item(TableName=table, Key=dict(key), ConsistentRead=True), doing
    )
    item = response.get("Item")
    return dict(item) if item else None
