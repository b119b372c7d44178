"""The tenant's index of sessions in trouble (blocked or suspended), on the audit table:
one item per session in a partition of its own per tenant, overwritten by the latest
event. Written only when a budget first runs out, a principal is escalated or a session
is suspended, never by an allowed check.

Item: pk "<tenant># trouble" (a space, which no session id holds), sk the session id,
kind, at, category, principal, expires_at (TTL, clean-up only: listings filter by `at`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from botocore.exceptions import BotoCoreError, ClientError

from chalicelib.storage.dynamodb.updates import n, s
from chalicelib.storage.faults import translate
from chalicelib.storage.ports import TroubleKind, TroubleMark

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

_PARTITION = "#pk = :pk"
KEEP_DAYS = 30


def _pk(tenant: str) -> str:
    return f"{tenant}# trouble"


def _mark(tenant: str, item: dict[str, Any]) -> TroubleMark:
    return TroubleMark(
        tenant=tenant,
        session_id=item["sk"]["S"],
        kind=TroubleKind(item["kind"]["S"]),
        at_ms=int(item["at"]["N"]),
        category=item.get("category", {}).get("S"),
        principal=item.get("principal", {}).get("S"),
    )


class TroubleStore:
    """Marks and lists the sessions in trouble."""

    def __init__(self, client: DynamoDBClient, table_name: str) -> None:
        self._client = client
        self._table = table_name

    def mark(self, mark: TroubleMark) -> None:
        """Record a session's latest trouble (overwrites its earlier entry).

        Raises:
            StorageError: the store failed.
        """
        item: dict[str, Any] = {
            "pk": s(_pk(mark.tenant)),
            "sk": s(mark.session_id),
            "kind": s(mark.kind.value),
            "at": n(mark.at_ms),
            "expires_at": n(mark.at_ms // 1000 + KEEP_DAYS * 86_400),
        }
        if mark.category is not None:
            item["category"] = s(mark.category)
        if mark.principal is not None:
            item["principal"] = s(mark.principal)
        try:
            self._client.put_item(TableName=self._table, Item=item)
        except (ClientError, BotoCoreError) as exc:
            raise translate(exc, "indexing a blocked session") from exc

    def marks(self, tenant: str, since_ms: int) -> list[TroubleMark]:
        """The tenant's entries from `since_ms`, newest first.

        Raises:
            StorageError: the store failed.
        """
        kwargs: dict[str, Any] = {
            "TableName": self._table,
            "KeyConditionExpression": _PARTITION,
            "ExpressionAttributeNames": {"#pk": "pk"},
            "ExpressionAttributeValues": {":pk": s(_pk(tenant))},
        }
        found: list[TroubleMark] = []
        while True:
            try:
                response = self._client.query(**kwargs)
            except (ClientError, BotoCoreError) as exc:
                raise translate(exc, "listing blocked sessions") from exc
            found += [_mark(tenant, dict(item)) for item in response.get("Items", [])]
            last = response.get("LastEvaluatedKey")
            if not last:
                break
            kwargs["ExclusiveStartKey"] = last
        kept = [m for m in found if m.at_ms >= since_ms]
        return sorted(kept, key=lambda m: (m.at_ms, m.session_id), reverse=True)
