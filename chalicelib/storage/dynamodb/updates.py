"""One conditional UpdateItem, as the counters-table adapters (session counters and the
wider budgets) issue it: only the names and values its expressions use, the old item on a
failed condition, every other error translated in one place."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from botocore.exceptions import BotoCoreError, ClientError

from chalicelib.storage.faults import error_code, translate

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

_PLACEHOLDER = re.compile(r"[#:][A-Za-z0-9_]+")


class ConditionFailed(Exception):
    """The update's condition failed; carries the old item when the store returned it."""

    def __init__(self, old_item: Mapping[str, Any] | None) -> None:
        super().__init__("conditional check failed")
        self.old_item = old_item


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
    try:
        response = client.update_item(
            TableName=table,
            Key=dict(key),
            UpdateExpression=expression,
            ReturnValues=returns,  # type: ignore[arg-type]
            **kwargs,
        )
    except ClientError as exc:
        if error_code(exc) == "ConditionalCheckFailedException":
            item: Any = exc.response.get("Item")
            raise ConditionFailed(item) from exc
        raise translate(exc, doing) from exc
    except BotoCoreError as exc:
        raise translate(exc, doing) from exc
    return dict(response.get("Attributes", {}))


def get(
    client: DynamoDBClient, table: str, key: Mapping[str, Any], doing: str
) -> dict[str, Any] | None:
    """A strongly consistent GetItem, or None.

    Raises:
        StorageError: the store failed.
    """
    try:
        response = client.get_item(TableName=table, Key=dict(key), ConsistentRead=True)
    except (ClientError, BotoCoreError) as exc:
        raise translate(exc, doing) from exc
    item = response.get("Item")
    return dict(item) if item else None
