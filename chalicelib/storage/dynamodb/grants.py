"""The grants port on DynamoDB: partition per tenant, one item per grant."""

from __future__ import annotations

from typing import Any

from chalicelib.quota.grants import Grant
from chalicelib.storage.dynamodb.updates import ConditionFailed, Table, all_items, call, conditional
from chalicelib.storage.ports import RecordNotFound

_EXISTS = "attribute_exists(#id)"
_OF_TENANT = "#tenant = :tenant"
_NAMES = {"#id": "grant_id"}
# TTL deletes a grant this long after its window closes (clean-up only: a grant applies
# by its window, never by its presence), so `grant list` still shows recent ones.
_KEEP_AFTER_END_SECONDS = 30 * 24 * 3600


def _item(grant: Grant) -> dict[str, Any]:
    return {
        "tenant": {"S": grant.tenant},
        "grant_id": {"S": grant.grant_id},
        "principal": {"S": grant.principal},
        "category": {"S": grant.category},
        "limit": {"N": str(grant.limit)},
        "starts_at": {"N": str(grant.starts_at_ms)},
        "ends_at": {"N": str(grant.ends_at_ms)},
        "reason": {"S": grant.reason},
        "created_by": {"S": grant.created_by},
        "created_at": {"N": str(grant.created_at_ms)},
        "expires_at": {"N": str(grant.ends_at_ms // 1000 + _KEEP_AFTER_END_SECONDS)},
    }


def _grant(item: dict[str, Any]) -> Grant:
    return Grant(
        grant_id=item["grant_id"]["S"],
        tenant=item["tenant"]["S"],
        principal=item["principal"]["S"],
        category=item["category"]["S"],
        limit=int(item["limit"]["N"]),
        starts_at_ms=int(item["starts_at"]["N"]),
        ends_at_ms=int(item["ends_at"]["N"]),
        reason=item["reason"]["S"],
        created_by=item["created_by"]["S"],
        created_at_ms=int(item["created_at"]["N"]),
    )


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
