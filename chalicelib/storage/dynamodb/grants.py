"""The grants port on DynamoDB: partition per tenant, one item per grant."""

from __future__ import annotations

from typing import Any

from chalicelib.quota.grants import Grant
from chalicelib.storage.dynamodb.updates import (
    ConditionFailed,
    Table,
    all_items,
    call,
    conditional,
    n,
    s,
)
from chalicelib.storage.ports import RecordNotFound

_EXISTS = "attribute_exists(#id)"
_OF_TENANT = "#tenant = :tenant"
_NAMES = {"#id": "grant_id"}
# TTL deletes a grant this long after its window closes (clean-up only: a grant applies
# by its window, never by its presence), so `grant list` still shows recent ones.
_KEEP_AFTER_END_SECONDS = 30 * 24 * 3600


# Each attribute of a grant's item and the field of `Grant` it holds: one table for both
# directions, so the item and the record cannot drift apart.
_TEXT = ("tenant", "grant_id", "principal", "category", "reason", "created_by")
_NUMBERS = {
    "limit": "limit",
    "starts_at": "starts_at_ms",
    "ends_at": "ends_at_ms",
    "created_at": "created_at_ms",
}


def _item(grant: Grant) -> dict[str, Any]:
    item = {attribute: s(getattr(grant, attribute)) for attribute in _TEXT}
    item.update({attribute: n(getattr(grant, f)) for attribute, f in _NUMBERS.items()})
    item["expires_at"] = n(grant.ends_at_ms // 1000 + _KEEP_AFTER_END_SECONDS)
    return item


def _grant(item: dict[str, Any]) -> Grant:
    fields: dict[str, Any] = {attribute: item[attribute]["S"] for attribute in _TEXT}
    fields.update({f: int(item[attribute]["N"]) for attribute, f in _NUMBERS.items()})
    return Grant(**fields)


class GrantStore(Table):
    """Create, list and delete grants."""

    def put(self, grant: Grant) -> None:
        """Store a new grant.

        Raises:
            StorageError: the store failed.
        """
        item = _item(grant)
        call(lambda: self._client.put_item(**self._as_new(item, "grant_id")), "storing a grant")

    def list(self, tenant: str) -> list[Grant]:
        """All grants of a tenant, in id order.

        Raises:
            StorageError: the store failed.
        """
        names, values = {"#tenant": "tenant"}, {":tenant": {"S": tenant}}
        items = all_items(
            lambda start: self._client.query(
                **self._query(_OF_TENANT, names, values, start, consistent=True)
            ),
            "listing grants",
        )
        return [_grant(item) for item in items]

    def delete(self, tenant: str, grant_id: str) -> Grant:
        """Delete a grant; returns it.

        Raises:
            RecordNotFound: no such grant in this tenant.
            StorageError: the store failed.
        """
        try:
            response = conditional(
                lambda: self._client.delete_item(
                    TableName=self._table,
                    Key={"tenant": {"S": tenant}, "grant_id": {"S": grant_id}},
                    ConditionExpression=_EXISTS,
                    ExpressionAttributeNames=_NAMES,
                    ReturnValues="ALL_OLD",
                ),
                "deleting a grant",
            )
        except ConditionFailed as failed:
            raise RecordNotFound("deleting a grant") from failed
        return _grant(dict(response["Attributes"]))
